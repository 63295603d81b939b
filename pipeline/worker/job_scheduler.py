"""Runs inside a CPU engine's engine-core process: vLLM's scheduler, made to let a small job
through when a big one fills the engine.

The worker already admits the jobs' requests fairly (pipeline/worker/admission.py), and vLLM's
priority policy seats a new job's requests first. What that cannot change: on a CPU engine each
step's time grows with the number of requests running, so a small job's requests, seated in a
batch full of a big job's, each decode several times slower than alone (a 16-row job's first
answer: 2 s alone, 13.5 s beside a 400-row job). So while a job with few requests in the engine
(at most a quarter of ``max_num_seqs``) shares it with a bigger one, the bigger jobs keep a few
seats (``max_num_seqs`` / 16) and step aside from the rest: their latest running requests are
preempted — vLLM's own preemption, which keeps what they generated, and whose prompt blocks stay
in the prefix cache, so they resume where they were — and their waiting requests are held back
until the small job's are answered. One job alone, or jobs of like size, are scheduled exactly
as vLLM's scheduler does.

A request's job is read from its request id (``<job id>-b<bucket>-<position>``, or a stream's
``<job id>-batch-<n>-<position>``). GPU engines keep vLLM's own scheduler: there a step's time
barely grows with the batch, and this class would turn async scheduling off.
"""

from __future__ import annotations

import re
import time
from collections import Counter

from vllm.v1.core.sched.scheduler import Scheduler

JOB_ID = re.compile(r"pipeline-job-[0-9a-f]{12}")


def job_of(request_id: str) -> str:
    """The job a request belongs to (a request id of another form is a job of its own)."""
    found = JOB_ID.search(request_id)
    return found.group(0) if found else request_id


class JobFairScheduler(Scheduler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._seats = self.max_num_active_reqs
        self._small = max(1, self.max_num_running_reqs // 4)  # a job with at most this many requests here
        self._reserve = max(1, self.max_num_running_reqs // 16)  # seats the bigger jobs keep meanwhile

    def schedule(self, *args, **kwargs):
        held = self._make_way()
        try:
            return super().schedule(*args, **kwargs)
        finally:
            self.max_num_active_reqs = self._seats
            for request in held:
                self.waiting.add_request(request)

    def _make_way(self) -> list:
        """Before a step: if a small job shares the engine with bigger ones, preempt the bigger
        jobs' running requests beyond the reserve (the latest first) and hold their waiting ones
        out of this step (returned, to be put back after it)."""
        running = Counter(job_of(r.request_id) for r in self.running)
        present = running + Counter(job_of(r.request_id) for r in self.waiting)
        if len(present) < 2:
            return []
        small = {job for job, n in present.items() if n <= self._small}
        if not small or len(small) == len(present):
            return []
        big_running = [r for r in self.running if job_of(r.request_id) not in small]
        excess = len(big_running) - self._reserve
        if excess > 0:
            now = time.monotonic()
            for request in sorted(big_running, key=lambda r: r.arrival_time)[-excess:]:
                self.running.remove(request)
                self._preempt_request(request, now)
        held = [r for r in self.waiting if job_of(r.request_id) not in small]
        if held:
            self.waiting.remove_requests(held)
        self.max_num_active_reqs = min(self._seats, sum(present[job] for job in small) + self._reserve)
        return held
