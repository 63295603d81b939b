"""Lets go of a job that ends early: its tasks are cancelled and waited for until no worker runs one. Dask's cancel
only tells the workers, and a running answer task commits what it holds before it stops, so waiting means nothing
is written after ``ClusterJob.run`` ends."""

from __future__ import annotations

import time

RUNNING = ("executing", "long-running", "cancelled", "resumed")  # a Dask task's states while its code runs
WAIT_S = 10.0  # a worker that does not answer is not waited for longer
POLL_S = 0.05


class Subscription:
    """A progress-topic handler that can be let go of. Dask keeps handlers for the client's life, and removing one
    makes a late event raise, so ``close`` drops the job it holds; otherwise a long stream's windows would stay in
    memory."""

    def __init__(self, handle):
        self.handle = handle

    def __call__(self, event) -> None:
        if self.handle is not None:
            self.handle(event)

    def close(self) -> None:
        self.handle = None


def job_tasks_running(dask_worker, job_id: str) -> int:
    """For ``client.run``: how many of the job's tasks this worker still runs."""
    prefix = f"{job_id}-"
    return sum(
        1
        for key, ts in list(dask_worker.state.tasks.items())
        if isinstance(key, str) and key.startswith(prefix) and ts.state in RUNNING
    )


def let_go(client, futures: list, job_id: str, wait_s: float = WAIT_S) -> None:
    """Cancels the unfinished ``futures`` and waits, at most ``wait_s``, until no worker runs a task of the job."""
    unfinished = [f for f in futures if not f.done()]
    if not unfinished:
        return
    for f in unfinished:
        f.cancel()
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            running = client.run(job_tasks_running, job_id=job_id, on_error="return")
        except Exception:  # noqa: BLE001 - the scheduler is gone: nothing more can be asked
            return
        if not any(isinstance(n, int) and n for n in running.values()):
            return
        time.sleep(POLL_S)
