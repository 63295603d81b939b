"""What every job's output shares: ``_job.json`` and the check that OUTPUT can be written."""

from __future__ import annotations

import os
from pathlib import Path

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
