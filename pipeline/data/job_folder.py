"""Where a cluster job's partial output lives: a folder on a local or shared file system, or a prefix on an object
store. Both guarantee that a visible file is whole: a local file is written under a temporary name and renamed,
and an object is written once, whole, under its final name. A folder removed while its job ran is never recreated;
a later write raises ``OutputGone``, so no answers land where a rerun could not use them."""

from __future__ import annotations

import errno
import io
import os
import posixpath
import shutil
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.data.errors import OutputGone

META = "_job.json"  # which input and partitions, checked on resume

# Write errors a retry cannot fix, so the job stops at once rather than answer its rows again to fail the same way.
PERMANENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}  # PermissionError counts too


def permanent_write_error(exc: BaseException) -> bool:
    """Whether writing failed for a reason another try will not fix, such as refused access, no space or a removed
    folder."""
    return isinstance(exc, (OutputGone, PermissionError)) or (
        isinstance(exc, OSError) and exc.errno in PERMANENT_ERRNOS
    )


class LocalFolder:
    def __init__(self, root: str | os.PathLike):
        self.root = str(root)
        self.url = self.root  # for messages

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def glob(self, pattern: str) -> list[str]:
        return sorted(str(p) for p in Path(self.root).glob(pattern))

    def create(self) -> None:
        """Makes the folder itself; ``ClusterParts.local`` has checked its parent."""
        Path(self.root).mkdir(exist_ok=True)

    def present(self) -> bool:
        return os.path.isdir(self.root)

    def write_table(self, path: str, table: pa.Table) -> None:
        with self._replaced(path) as f:
            pq.write_table(table, f)

    def write_bytes(self, path: str, data: bytes) -> None:
        with self._replaced(path) as f:
            f.write(data)

    @contextmanager
    def _replaced(self, path: str):
        """A file written under a temporary name, synced, then renamed to ``path``, so that a file that exists is
        whole."""
        tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
        with self._inside(path):
            with open(tmp, "wb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)

    @contextmanager
    def _inside(self, path: str):
        """Makes the folders below the root for ``path``, never the root itself, and raises ``OutputGone`` if it was
        removed."""
        folder = Path(self.root)
        try:
            for name in Path(path).parent.relative_to(folder).parts:
                folder = folder / name
                folder.mkdir(exist_ok=True)
            if not os.path.isdir(self.root):
                raise FileNotFoundError(errno.ENOENT, "no such folder", self.root)
            yield
        except FileNotFoundError:
            if os.path.isdir(self.root):
                raise
            raise OutputGone.at(self.url) from None

    def read_bytes(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def read_table(self, path: str, **options) -> pa.Table:
        return pq.read_table(path, **options)

    def num_rows(self, path: str) -> int:
        return pq.ParquetFile(path).metadata.num_rows

    def read_schema(self, path: str) -> pa.Schema:
        return pq.read_schema(path)

    def remove_file(self, path: str) -> None:
        os.unlink(path)

    def drop_torn(self) -> None:
        for leftover in Path(self.root).glob("**/.*.tmp"):
            leftover.unlink(missing_ok=True)  # a stopped run's task may finish its write meanwhile

    @contextmanager
    def writing(self, final: str):
        """A file to write OUTPUT to, which appears at ``final`` whole when the block ends."""
        tmp = self.path(".final.tmp")
        with self._inside(tmp), open(tmp, "wb") as f:
            yield f
        os.replace(tmp, final)

    def remove(self) -> None:
        shutil.rmtree(self.root)


class StoreFolder:
    def __init__(self, fs, root: str, url: str):
        self.fs, self.root, self.url = fs, root.rstrip("/"), url

    def path(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    def exists(self, path: str) -> bool:
        self.fs.invalidate_cache(posixpath.dirname(path))  # other workers write here too
        return self.fs.exists(path)

    def glob(self, pattern: str) -> list[str]:
        self.fs.invalidate_cache()  # a cached listing may miss other workers' writes
        return sorted(self.fs.glob(self.path(pattern)))

    def create(self) -> None:
        """An object store's prefix exists once an object is written under it."""

    def present(self) -> bool:
        return self.exists(self.path(META))

    def write_table(self, path: str, table: pa.Table) -> None:
        buf = io.BytesIO()
        pq.write_table(table, buf)
        if not self.present():  # a removed folder is never started again here
            raise OutputGone.at(self.url)
        self.fs.pipe_file(path, buf.getvalue())

    def write_bytes(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(path, data)

    def read_bytes(self, path: str) -> bytes:
        return self.fs.cat_file(path)

    def read_table(self, path: str, **options) -> pa.Table:
        return pq.read_table(path, filesystem=self.fs, **options)

    def num_rows(self, path: str) -> int:
        with self.fs.open(path, "rb") as f:
            return pq.ParquetFile(f).metadata.num_rows

    def read_schema(self, path: str) -> pa.Schema:
        with self.fs.open(path, "rb") as f:
            return pq.read_schema(f)

    def remove_file(self, path: str) -> None:
        self.fs.rm_file(path)

    def drop_torn(self) -> None:
        """An object is written whole or not at all."""

    @contextmanager
    def writing(self, final: str):
        with self.fs.open(final, "wb") as f:  # appears whole when the upload completes
            yield f

    def remove(self) -> None:
        self.fs.invalidate_cache()
        if self.fs.exists(self.root):
            self.fs.rm(self.root, recursive=True)
