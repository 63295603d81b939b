"""What the pipeline shows on the user's terminal: a line to stderr (``notify``), a line shown
in place (``live_line``), Dask's and vLLM's logs kept to warnings (``quiet_logs``), for the
command line and the Python API alike; and the command line's exit codes."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Callable

# The command line's exit codes: 0 done; 2 the job cannot start (bad input, output, config or
# model: nothing ran); 1 the job stopped midway (what was committed is kept: run the same
# command again to resume); 130 interrupted (likewise).
EXIT_USAGE = 2
EXIT_STOPPED = 1
EXIT_INTERRUPTED = 130

# Loggers of libraries that log at INFO in the user's process (an embedded cluster's nannies
# run there: "distributed.nanny - INFO - Start Nanny at ...").
LIBRARY_LOGGERS = ("distributed", "vllm")


def notify(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def live_line() -> Callable[[str], None] | None:
    """A function that shows one line in place on a terminal (None when stderr is not one)."""
    if not sys.stderr.isatty():
        return None

    def live(text: str) -> None:
        sys.stderr.write("\r\033[K" + text)
        sys.stderr.flush()

    return live


def quiet_logs(workers: bool = False) -> dict[str, int]:
    """This process's Dask and vLLM loggers: warnings only; returns their levels before, for
    ``restore_logs``. ``workers``: the workers this process spawns too, whose output is not
    sent to log files (they inherit the environment, and Dask and vLLM read these variables
    when they are first imported there)."""
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
    """Logger ``name`` says nothing below CRITICAL inside the block."""
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
