"""Kills a worker's engine processes when the worker process dies.

vLLM runs its engine core in a child process, which a worker killed outright cannot stop, and the orphan keeps its
memory and pinned core. After the engine is built, the worker starts this watchdog in a small process of its own.
The watchdog checks each child's start time, so a reused pid is left alone."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time

import psutil


def start(parent_pid: int, child_pids: list[int]) -> subprocess.Popen | None:
    """Starts the watchdog; None where there is nothing to watch."""
    if not child_pids:
        return None
    # The watchdog imports only this module and psutil, since pipeline/__init__.py and pipeline/worker/__init__.py
    # import nothing eagerly.
    code = "import sys; from pipeline.worker.reaper import watch; watch(int(sys.argv[1]), [*map(int, sys.argv[2:])])"
    return subprocess.Popen(
        [sys.executable, "-c", code, str(parent_pid), *map(str, child_pids)],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def engine_children() -> list[int]:
    """This process's live child processes; after building an engine, its engine core."""
    return [c.pid for c in psutil.Process().children(recursive=False) if c.is_running()]


def watch(parent_pid: int, child_pids: list[int], interval_s: float = 0.5) -> list[int]:
    """Block until ``parent_pid`` is gone, then kill ``child_pids``; returns the pids killed."""
    children = []
    for pid in child_pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            children.append(psutil.Process(pid))
    try:
        parent = psutil.Process(parent_pid)
    except psutil.NoSuchProcess:
        parent = None
    while parent is not None and parent.is_running() and parent.status() != psutil.STATUS_ZOMBIE:
        if not any(c.is_running() for c in children):
            return []  # the engine stopped on its own
        time.sleep(interval_s)
    killed = []
    for c in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            if c.is_running():  # same pid *and* start time
                for grandchild in c.children(recursive=True):
                    grandchild.kill()
                c.kill()
                killed.append(c.pid)
    return killed
