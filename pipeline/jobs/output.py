"""Job output, written as results complete, committed so that a killed job loses nothing
it has committed and never leaves a corrupt file.

While the job runs, results go to ``OUTPUT.partial/`` (next to OUTPUT), in input order:
Parquet parts (``part-000000.parquet``, ..., each written to a temporary name and renamed)
or, for OpenAI batch JSONL, whole lines appended to ``results.jsonl`` and synced.
``_job.json`` there records which input the results belong to. When every row is done the
parts become OUTPUT in one rename (Parquet parts are first copied, part by part, into one
file), and the folder is removed. Running the same command again after an interruption
resumes from what ``OUTPUT.partial/`` holds.
"""
from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
import shutil
import time
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.jobs.errors import JobError

META = "_job.json"


def check_writable(final: Path) -> Path:
    """The folder that will hold the partial results, after checking OUTPUT can be written."""
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
    return final.with_name(final.name + ".partial")


class PartialOutput(ABC):
    """Results committed so far, and where the next ones go."""

    unchecked: tuple[str, ...] = ("started",)   # what may differ between a run and the one it resumes

    def __init__(self, final: Path, meta: dict):
        self.final = final
        self.dir = check_writable(final)
        self.meta = meta
        self.committed = 0       # rows committed
        self.resumed = 0         # rows found committed when the job started
        self._last_commit = time.monotonic()

    # -- start / resume ----------------------------------------------------------------
    def open(self) -> int:
        """Create the folder or take up the one a previous run left; the rows it holds."""
        meta_path = self.dir / META
        if self.dir.exists():
            try:
                old = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                raise JobError(f"{self.dir} exists but is not a partial output of this program "
                               f"(no readable {META}); move or delete it") from None
            diff = meta_differences(old, self.meta, self.unchecked)
            if diff and self._recover() == 0:  # nothing committed: nothing to lose
                write_atomic(meta_path, json.dumps(self.meta, indent=2).encode())
                return 0
            if diff:
                raise JobError(f"{self.dir} holds partial results of another job (different {diff}); "
                               f"run the original command again to finish it, or delete the folder to start over")
            self.meta = old  # keeps the first run's start time
            self.committed = self.resumed = self._recover()
        else:
            self.dir.mkdir()
            write_atomic(meta_path, json.dumps(self.meta, indent=2).encode())
        return self.committed

    @abstractmethod
    def _recover(self) -> int:
        """Drop whatever a killed job left half-written; the rows committed."""

    @abstractmethod
    def committed_keys(self) -> Iterator[list]:
        """The committed rows' keys, in order."""

    def due(self, buffered_rows: int, part_rows: int, flush_seconds: float) -> bool:
        return buffered_rows >= part_rows or (
            buffered_rows > 0 and time.monotonic() - self._last_commit >= flush_seconds)

    def _committed_now(self, rows: int) -> None:
        self.committed += rows
        self._last_commit = time.monotonic()


class ParquetParts(PartialOutput):
    def __init__(self, final: Path, meta: dict, schema: pa.Schema):
        super().__init__(final, meta)
        self.schema = schema
        self._parts: list[Path] = []

    def _recover(self) -> int:
        for leftover in self.dir.glob(".part-*.tmp"):
            leftover.unlink()  # a part being written when the job was killed
        self._parts = sorted(self.dir.glob("part-*.parquet"))
        rows = 0
        for p in self._parts:
            try:
                rows += pq.ParquetFile(p).metadata.num_rows
            except (pa.ArrowException, OSError) as exc:
                raise JobError(f"committed part {p} is unreadable ({exc}); delete {self.dir} to start over") from None
        return rows

    def committed_keys(self) -> Iterator[list]:
        for p in self._parts:
            yield pq.read_table(p, columns=["id"]).column("id").to_pylist()

    def commit(self, batches: list[pa.RecordBatch]) -> None:
        if not batches:
            return
        table = pa.Table.from_batches(batches, schema=self.schema)
        path = self.dir / f"part-{len(self._parts):06d}.parquet"
        write_table_atomic(path, table)
        self._parts.append(path)
        self._committed_now(table.num_rows)

    def finish(self) -> None:
        tmp = self.dir / ".final.tmp"
        with pq.ParquetWriter(tmp, self.schema) as writer:
            for p in self._parts:  # one part in memory at a time
                writer.write_table(pq.read_table(p, schema=self.schema))
        os.replace(tmp, self.final)
        shutil.rmtree(self.dir)


class JsonlLines(PartialOutput):
    def __init__(self, final: Path, meta: dict):
        super().__init__(final, meta)
        self.path = self.dir / "results.jsonl"

    def _recover(self) -> int:
        if not self.path.exists():
            return 0
        with open(self.path, "rb+") as f:
            data_end = 0
            lines = 0
            for line in iter(f.readline, b""):
                if not line.endswith(b"\n"):
                    break  # a line being written when the job was killed
                data_end += len(line)
                lines += 1
            f.truncate(data_end)
        return lines

    def committed_keys(self) -> Iterator[list]:
        if self.path.exists():
            with open(self.path, "rb") as f:
                yield [json.loads(line).get("custom_id") for line in f]

    def commit(self, lines: list[str]) -> None:
        if not lines:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        self._committed_now(len(lines))

    def finish(self) -> None:
        if not self.path.exists():
            self.path.write_bytes(b"")
        os.replace(self.path, self.final)
        shutil.rmtree(self.dir)


def meta_differences(old: dict, new: dict, unchecked: tuple[str, ...]) -> str:
    """The keys (comma-separated) in which a partial output's recorded ``_job.json`` and this
    run's differ, those in ``unchecked`` aside ("": the same job)."""
    return ", ".join(k for k in sorted(set(old) | set(new)) if k not in unchecked and old.get(k) != new.get(k))


def write_table_atomic(path: Path, table: pa.Table) -> None:
    """``table`` as Parquet at ``path``: written and synced under a temporary name, then renamed,
    so a file that exists is whole."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        pq.write_table(table, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
