"""vLLM's scheduler for CPU engines, run inside the engine-core process, made to let a small job through when a big
one fills the engine.

On CPU each step's time grows with the number of running requests, so a small job's requests decode several times
slower in a batch full of a big job's. While a small job shares the engine with bigger ones, the bigger jobs keep a
few seats and step aside from the rest: their latest running requests are preempted, keeping what they generated and
their prefix blocks, and their waiting ones are held back. Otherwise this schedules exactly as vLLM's scheduler
does. GPU engines keep vLLM's own: there a step barely slows with the batch, and this class would turn async
scheduling off."""

from __future__ import annotations

import re
import time
from collections import Counter

from vllm.v1.core.sched.scheduler import Scheduler

JOB_ID = re.compile(r"pipeline-job-[0-9a-f]{12}")


def job_of(request_id: str) -> str:
    """A request id without a job id is a job of its own."""
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
        """Preempts the bigger jobs' running requests beyond the reserve, latest first, and returns their waiting
        ones, held out of this step."""
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
