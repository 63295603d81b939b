"""The embedded cluster's scheduler runs in its own process: it must not outlive its client."""

import os
import subprocess
import sys
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]

HOLD = """
import time
from pipeline import Pipeline
if __name__ == "__main__":
    with Pipeline(engine="fake", notify=lambda line: None):
        print("ready", flush=True)
        time.sleep(600)
"""


def test_a_killed_client_leaves_no_scheduler_or_worker_behind(tmp_path):
    script = tmp_path / "hold.py"
    script.write_text(HOLD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=tmp_path, env=env
    )
    try:
        assert proc.stdout.readline().strip() == b"ready"
        children = psutil.Process(proc.pid).children(recursive=True)
        schedulers = [
            c for c in children if any(k in " ".join(c.cmdline()) for k in ("dask_scheduler", "dask scheduler"))
        ]
        assert len(schedulers) == 1 and len(children) >= 3  # the scheduler and a worker per shard
    finally:
        proc.kill()  # SIGKILL: nothing in the client gets to clean up
        proc.wait()
    gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, f"left running: {[' '.join(p.cmdline())[:80] for p in alive]}"
