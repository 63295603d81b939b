"""Runs on a shard's worker: which job's request goes to the engine next.

Several jobs share one engine (a resident cluster serves every client's jobs). First come,
first served would make a small job wait behind every request a big job has queued, a minute
or more on a real engine. Instead a job below its share of the places goes in at once, each job
waits in a queue of its own, and a free place goes to the job that has had the fewest requests
admitted on this engine ("least attained service"): a job that just arrived is served at once,
and two long jobs take turns.

The same count is the request's priority in vLLM's scheduler (``scheduling_policy:
priority``, lower first; pipeline/worker/vllm_engine.py), so a new job's requests also pass the
requests that wait inside the engine for a seat. With one job the counts rise with arrival,
and the order is exactly first come, first served.
"""

from __future__ import annotations

import asyncio
import collections


class FairAdmission:
    """About ``slots`` requests in the engine at a time, shared between jobs.

    ``acquire(job)`` waits for a place and returns the request's priority (the job's admitted
    requests before it, the fewest first); ``release(job)`` frees the place. A job's own
    requests keep their order. A job with fewer requests in the engine than its share
    (``slots`` / the jobs present) goes in at once, even when other jobs fill every place: a
    job that arrives beside a big one does not wait for the big one's requests to end (on a CPU
    engine, seconds). So at most about 2 × ``slots`` are in the engine; places are handed on
    only once fewer than ``slots`` are."""

    def __init__(self, slots: int):
        self.slots = slots
        self.in_engine = 0
        self._held: dict[str, int] = {}  # job -> its requests in the engine
        self._waiting: dict[str, collections.deque[asyncio.Future]] = {}
        self._served: dict[str, int] = {}  # job -> requests admitted while it was active
        self._active: dict[str, int] = {}  # job -> its requests waiting or admitted

    @property
    def free(self) -> int:
        """Places left below ``slots`` (0 when a job's share took it over)."""
        return max(0, self.slots - self.in_engine)

    def jobs(self) -> int:
        """Jobs with requests waiting or in the engine."""
        return len(self._active)

    def _below_share(self, job: str) -> bool:
        return self._held.get(job, 0) < self.slots // len(self._active)

    async def acquire(self, job: str) -> int:
        self._active[job] = self._active.get(job, 0) + 1
        self._served.setdefault(job, 0)
        if not self._waiting.get(job) and (
            (self.in_engine < self.slots and not self._waiting) or self._below_share(job)
        ):
            return self._admit(job)
        place = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(job, collections.deque()).append(place)
        try:
            return await place
        except asyncio.CancelledError:
            if place.done() and not place.cancelled():  # (admitted as it was cancelled: pass the place on)
                self.release(job)
            else:
                queue = self._waiting.get(job)
                if queue is not None and place in queue:  # (``release`` may have dropped it already)
                    queue.remove(place)
                    if not queue:
                        del self._waiting[job]
                self._left(job)
            raise

    def release(self, job: str) -> None:
        """A request of ``job`` has left the engine; places go to the least-served jobs waiting."""
        self.in_engine -= 1
        self._held[job] -= 1
        if not self._held[job]:
            del self._held[job]
        self._left(job)
        while self._waiting:
            ready = [j for j in self._waiting if self.in_engine < self.slots or self._below_share(j)]
            if not ready:
                return
            nxt = min(ready, key=self._served.__getitem__)  # (ties: the job that waited first)
            queue = self._waiting[nxt]
            place = queue.popleft()
            if not queue:
                del self._waiting[nxt]
            if not place.cancelled():
                place.set_result(self._admit(nxt))

    def _admit(self, job: str) -> int:
        self.in_engine += 1
        self._held[job] = self._held.get(job, 0) + 1
        priority = self._served[job]
        self._served[job] = priority + 1
        return priority

    def _left(self, job: str) -> None:
        self._active[job] -= 1
        if not self._active[job]:  # (a job that comes back starts again from nothing)
            del self._active[job], self._served[job]


class TokenGate:
    """A bucket's documents held back while the requests in flight hold ``budget`` tokens of the
    engine's KV cache (``intake.kv_budget_share`` of it), so a document's questions are not
    evicted between one another. Shared by every job on the engine, but not first come, first
    served: a job may always start a document while it holds none, or while it holds less than
    its share of the budget (``budget`` / the jobs holding or asking), so a job that arrives
    beside a big one starts its documents at once. (A document larger than the budget still
    runs, alone.)"""

    def __init__(self, budget: float):
        self.budget = budget
        self.held = 0.0
        self._by_job: dict[str, float] = {}
        self._asking: dict[str, int] = {}
        self._changed = asyncio.Condition()

    def _may_go(self, job: str, tokens: float) -> bool:
        own = self._by_job.get(job, 0.0)
        if not own or self.held + tokens <= self.budget:
            return True
        jobs = len(set(self._by_job) | set(self._asking))
        return own + tokens <= self.budget / jobs

    async def acquire(self, tokens: float, job: str = "") -> None:
        async with self._changed:
            self._asking[job] = self._asking.get(job, 0) + 1
            try:
                await self._changed.wait_for(lambda: self._may_go(job, tokens))
            finally:
                self._asking[job] -= 1
                if not self._asking[job]:
                    del self._asking[job]
            self.held += tokens
            self._by_job[job] = self._by_job.get(job, 0.0) + tokens

    async def release(self, tokens: float, job: str = "") -> None:
        async with self._changed:
            self.held -= tokens
            left = self._by_job[job] - tokens
            if left > 1e-9:
                self._by_job[job] = left
            else:
                del self._by_job[job]
            self._changed.notify_all()
