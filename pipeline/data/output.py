"""What every job's output shares: ``_job.json``, the check that OUTPUT can be written, and writes that never leave a
torn file."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.data.errors import JobError

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


def meta_differences(old: dict, new: dict, unchecked: tuple[str, ...]) -> str:
    """The keys in which the recorded ``_job.json`` and this run's differ, apart from ``unchecked``."""
    return ", ".join(k for k in sorted(set(old) | set(new)) if k not in unchecked and old.get(k) != new.get(k))


def write_table_atomic(path: Path, table: pa.Table) -> None:
    """Writes ``table`` under a temporary name, synced, then renames it, so that a file that exists is whole."""
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
