"""The watchdog that stops an engine process whose worker was killed outright."""

import os
import signal
import subprocess
import sys
import time

import psutil

from pipeline.worker import reaper

# A stand-in worker: starts a long-lived child (as vLLM starts its engine core), starts the
# reaper for it, prints the child's pid, then waits to be killed.
WORKER = """
import subprocess, sys, time
from pipeline.worker import reaper
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
reaper.start(__import__("os").getpid(), reaper.engine_children())
print(child.pid, flush=True)
time.sleep(120)
"""


def _gone(pid, within_s):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.1)
    return False


def test_engine_child_is_killed_when_its_worker_is_killed():
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )
    child = int(worker.stdout.readline())
    try:
        time.sleep(1.0)
        assert psutil.pid_exists(child)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        assert _gone(child, 10), "the orphaned child outlived its worker"
    finally:
        if psutil.pid_exists(child):
            os.kill(child, signal.SIGKILL)


def test_watch_returns_without_killing_when_the_children_end_first():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert reaper.watch(os.getpid(), [child.pid], interval_s=0.05) == []
