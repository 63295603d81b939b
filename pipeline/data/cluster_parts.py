"""The client's side of a cluster job's partial output: opened, or taken up by a resumed run after the checks that
make resuming safe."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa

from pipeline.data.answer_files import AnswerFiles
from pipeline.data.errors import JobError
from pipeline.data.job_folder import META, LocalFolder, StoreFolder
from pipeline.data.partitions import Partition
from pipeline.data.storage import filesystem, store_error


class ClusterParts:
    """A job's OUTPUT.partial. Resuming refuses another job's committed results and an input file changed under
    committed answers."""

    # files are checked one by one, and rows follow from them
    unchecked = ("started", "files", "rows")

    def __init__(
        self,
        folder: LocalFolder | StoreFolder,
        final,
        where,
        meta: dict,
        schema: pa.Schema,
        partitions: list[Partition],
        store_url: str | None = None,
    ):
        self.folder, self.final, self.dir = folder, final, where  # dir names the folder in messages
        self.files = AnswerFiles(folder)
        self.meta, self.schema, self.partitions = meta, schema, partitions
        self.committed = self.resumed = 0
        self.notes: list[str] = []  # what opening it found and did
        self._store_url = store_url  # OUTPUT's URL on an object store, to word its errors

    @classmethod
    def local(cls, final: Path, meta: dict, schema: pa.Schema, partitions: list) -> "ClusterParts":
        """After checking that OUTPUT can be written."""
        if final.is_dir():
            raise JobError(f"output path {final} is a folder; give a file name (e.g. {final / 'answers.parquet'})")
        parent = final.parent
        if not parent.exists():
            raise JobError(f"output folder does not exist: {parent}")
        if not parent.is_dir():
            raise JobError(f"output path {final} is not writable: {parent} is not a folder")
        probe = parent / f".{final.name}.probe-{os.getpid()}"
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise JobError(f"output folder is not writable: {parent} ({exc.strerror or exc})") from None
        where = final.with_name(final.name + ".partial")
        return cls(LocalFolder(where), final, where, meta, schema, partitions)

    @classmethod
    def on_store(
        cls, url: str, meta: dict, schema: pa.Schema, partitions: list, storage_options: dict | None = None
    ) -> "ClusterParts":
        """On an object store each file is one object written once under its final name, and OUTPUT appears when its
        upload completes."""
        fs, path = filesystem(url, storage_options)
        partial = url + ".partial"
        return cls(StoreFolder(fs, path + ".partial", partial), path, partial, meta, schema, partitions, url)

    def open(self) -> int:
        """Starts the folder, or takes up the one an earlier run left; returns the rows it holds committed."""
        try:
            return self._open()
        except JobError:
            raise
        except Exception as exc:  # noqa: BLE001 - an object store's credentials, bucket, network
            if self._store_url is None:
                raise
            raise store_error(exc, self._store_url) from None

    def _open(self) -> int:
        current = self.meta["files"]
        old = self._old_meta()
        if old is None:
            self.folder.create()
        else:
            self.folder.drop_torn()
            keys = sorted(set(old) | set(self.meta))
            diff = ", ".join(k for k in keys if k not in self.unchecked and old.get(k) != self.meta.get(k))
            if diff and self.folder.glob("answers/p*/*.parquet") + self.folder.glob("parts/*.parquet"):
                raise JobError(
                    f"{self.dir} holds partial results of another job (different {diff}); run the "
                    f"original command again to finish it, or delete it to start over"
                )
            if not diff:
                self.notes += self.files.drop_damaged(self.partitions, self.schema)
                self.meta = old  # keeps the first run's start time
                self.committed = self.resumed = self.files.committed_rows(self.partitions)
                # An input file changed under committed answers is refused: answers are matched to rows by position.
                for i, (was, now) in enumerate(zip(old.get("files") or [], current)):
                    if was != now and self.files.committed_rows([p for p in self.partitions if p.file == i]):
                        raise JobError(
                            f"input file {old['input'][i]} changed since this job started, and {self.dir} holds "
                            f"answers for its rows; run it with the original file, or delete the folder to start over"
                        )
        self.meta["files"] = current
        self.record()
        return self.committed

    def _old_meta(self) -> dict | None:
        """An earlier run's ``_job.json``; None if there is no folder yet."""
        try:
            old = json.loads(self.folder.read_bytes(self.folder.path(META)))
        except (FileNotFoundError, ValueError) as exc:
            missing = isinstance(exc, FileNotFoundError)
            if missing and not self.folder.exists(self.folder.root):
                return None
            raise JobError(
                f"{self.dir} exists but is not a partial output of this program ({'no' if missing else 'unreadable'} "
                f"{META}); move or delete it"
            ) from None
        return old if isinstance(old, dict) else {}

    def refresh(self) -> int:
        self.committed = self.files.committed_rows(self.partitions)
        return self.committed

    def record(self, **facts) -> None:
        """Adds ``facts`` to the partial output's ``_job.json``, which a resumed run reads, and writes it."""
        self.meta.update(facts)
        self.folder.write_bytes(self.folder.path(META), json.dumps(self.meta, indent=2).encode())
