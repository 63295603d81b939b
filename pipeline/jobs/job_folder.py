"""Where a cluster job's partial output lives (``OUTPUT.partial``), as its workers and its client
write and read it: a folder on a local or shared file system (``LocalFolder``), or a prefix on
an object store through fsspec (``StoreFolder``: ``s3://``, ``gs://``, ``memory://``, ...).

Both give the one guarantee the job's commits rest on (pipeline/jobs/answer_files.py): a file
that can be seen is whole. A local file is written under a temporary name, synced and renamed; an
object store writes each object whole or not at all, and has no rename, so an object is written
once, under its final name. Paths are strings within the folder's file system.
"""
from __future__ import annotations

import io
import os
import posixpath
import shutil
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.jobs.output import write_atomic, write_table_atomic


class LocalFolder:
    def __init__(self, root: str | os.PathLike):
        self.root = str(root)
        self.url = self.root   # for messages

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def glob(self, pattern: str) -> list[str]:
        """The files matching ``pattern`` (relative to the folder), sorted."""
        return sorted(str(p) for p in Path(self.root).glob(pattern))

    def write_table(self, path: str, table: pa.Table) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_table_atomic(Path(path), table)

    def write_bytes(self, path: str, data: bytes) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(Path(path), data)

    def read_bytes(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def read_table(self, path: str, **options) -> pa.Table:
        return pq.read_table(path, **options)

    def num_rows(self, path: str) -> int:
        return pq.ParquetFile(path).metadata.num_rows

    def drop_torn(self) -> None:
        """Files a killed writer left half written (under their temporary names)."""
        for leftover in Path(self.root).glob("**/.*.tmp"):
            leftover.unlink()

    @contextmanager
    def writing(self, final: str):
        """A file to write OUTPUT to; it appears at ``final`` whole, when the block ends."""
        tmp = self.path(".final.tmp")
        with open(tmp, "wb") as f:
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
        self.fs.invalidate_cache(posixpath.dirname(path))   # (other workers write here too)
        return self.fs.exists(path)

    def glob(self, pattern: str) -> list[str]:
        self.fs.invalidate_cache()   # (a listing cached by this process may miss other workers' writes)
        return sorted(self.fs.glob(self.path(pattern)))

    def write_table(self, path: str, table: pa.Table) -> None:
        buf = io.BytesIO()
        pq.write_table(table, buf)
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

    def drop_torn(self) -> None:
        """Nothing to drop: an object is written whole or not at all."""

    @contextmanager
    def writing(self, final: str):
        with self.fs.open(final, "wb") as f:   # appears whole when the upload completes
            yield f

    def remove(self) -> None:
        self.fs.invalidate_cache()
        if self.fs.exists(self.root):
            self.fs.rm(self.root, recursive=True)
