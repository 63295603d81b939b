"""A job's tasks let go when it ends before its last answer (a write failed for good, the user
stopped it, an error): cancelled, and waited for until no worker still runs one.

Dask's cancel only tells the workers; an answer task running there stops a moment later, and
the answers it had in hand are committed before it ends (pipeline/worker/grouped_answers.py).
Waiting for that here means that once ``ClusterJob.run`` has returned or raised, nothing of the
job is written any more: a rerun started at once reads a folder that stays as it read it."""

from __future__ import annotations

import time

RUNNING = ("executing", "long-running", "cancelled", "resumed")  # a Dask task's states while its code runs
WAIT_S = 10.0  # at most this long: a worker that does not answer is not waited for
POLL_S = 0.05


class Subscription:
    """A job's handler of its progress topic, for ``client.subscribe_topic``. Dask keeps a handler
    after ``unsubscribe_topic``, for the client's life (``Client._event_handlers``; popping it
    there makes a late event raise), so this one lets go of ``handle`` (which holds the job: its
    steps, a stream window's prompt rows) once ``close`` d: every window of a long stream
    otherwise stays in the client's memory."""

    def __init__(self, handle):
        self.handle = handle

    def __call__(self, event) -> None:
        if self.handle is not None:
            self.handle(event)

    def close(self) -> None:
        self.handle = None


def job_tasks_running(dask_worker, job_id: str) -> int:
    """For ``client.run``: how many of job ``job_id``'s tasks this worker still runs."""
    prefix = f"{job_id}-"
    return sum(
        1
        for key, ts in list(dask_worker.state.tasks.items())
        if isinstance(key, str) and key.startswith(prefix) and ts.state in RUNNING
    )


def let_go(client, futures: list, job_id: str, wait_s: float = WAIT_S) -> None:
    """The job's unfinished ``futures`` cancelled; if there were any, returns once no worker
    runs a task of the job (or after ``wait_s``, or at once where the cluster cannot be asked)."""
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
