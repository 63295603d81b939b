"""Stop a worker's engine processes when the worker process dies.

vLLM runs its engine core in a child process. A worker killed outright (SIGKILL, OOM
killer) cannot stop it, and the orphan keeps its memory and its pinned core. After the
engine is built, the worker starts this watchdog with its own pid and its children's;
when the worker is gone, the watchdog kills those children (the same processes: the
start time is checked, so a reused pid is left alone) and exits.

    python -m pipeline.worker.reaper WORKER_PID CHILD_PID...
"""

from __future__ import annotations

import subprocess
import sys
import time

import psutil


def start(parent_pid: int, child_pids: list[int]) -> subprocess.Popen | None:
    """Start the watchdog for ``child_pids`` of ``parent_pid`` (none: nothing to watch)."""
    if not child_pids:
        return None
    # Only this module and psutil are imported in the watchdog (pipeline/__init__.py and
    # pipeline/worker/__init__.py import nothing eagerly).
    code = "import sys; from pipeline.worker.reaper import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.Popen(
        [sys.executable, "-c", code, str(parent_pid), *map(str, child_pids)],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def engine_children() -> list[int]:
    """This process's live child processes (after building an engine: its engine core)."""
    return [c.pid for c in psutil.Process().children(recursive=False) if c.is_running()]


def watch(parent_pid: int, child_pids: list[int], interval_s: float = 0.5) -> list[int]:
    """Block until ``parent_pid`` is gone, then kill ``child_pids``; returns the pids killed."""
    children = []
    for pid in child_pids:
        try:
            children.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    try:
        parent = psutil.Process(parent_pid)
    except psutil.NoSuchProcess:
        parent = None
    while parent is not None and parent.is_running() and parent.status() != psutil.STATUS_ZOMBIE:
        if not any(c.is_running() for c in children):
            return []  # the engine stopped on its own (normal shutdown)
        time.sleep(interval_s)
    killed = []
    for c in children:
        try:
            if c.is_running():  # same pid *and* start time
                for grandchild in c.children(recursive=True):
                    grandchild.kill()
                c.kill()
                killed.append(c.pid)
        except psutil.NoSuchProcess:
            pass
    return killed


def main(argv: list[str]) -> int:
    watch(int(argv[0]), [int(a) for a in argv[1:]])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
