"""What the pipeline shows on the user's terminal, for the command line and the Python API alike,
and the command line's exit codes."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Callable

EXIT_USAGE = 2  # the job could not start, and nothing ran
EXIT_STOPPED = 1  # the job stopped midway; the same command again resumes it
EXIT_INTERRUPTED = 130

# Libraries that log at INFO in the user's process, where an embedded cluster's nannies run.
LIBRARY_LOGGERS = ("distributed", "vllm")


def notify(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def live_line() -> Callable[[str], None] | None:
    """A function that shows one line in place on a terminal; None when stderr is not one."""
    if not sys.stderr.isatty():
        return None

    def live(text: str) -> None:
        sys.stderr.write("\r\033[K" + text)
        sys.stderr.flush()

    return live


def quiet_logs(workers: bool = False) -> dict[str, int]:
    """Keep this process's Dask and vLLM loggers to warnings; returns their levels for ``restore_logs``.
    With ``workers`` the environment quiets the workers this process spawns too."""
    if workers:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    before = {}
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        before[name] = logger.level
        if logger.getEffectiveLevel() < logging.WARNING:
            logger.setLevel(logging.WARNING)
    return before


@contextlib.contextmanager
def quiet_logger(name: str):
    """Silence logger ``name`` below CRITICAL inside the block."""
    logger = logging.getLogger(name)
    before = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(before)


def restore_logs(levels: dict[str, int]) -> None:
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
