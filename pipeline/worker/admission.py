"""Decides which job's request goes to the engine next when several jobs share it.

First come, first served would make a small job wait behind everything a big job has queued. Instead a job below its
share of the places goes in at once, and a free place goes to the job with the fewest requests admitted so far, so a
new job is served at once and long jobs take turns. That count is also the request's priority in vLLM's priority
scheduler, so a new job's requests pass those waiting inside the engine too; with one job the order is first come,
first served."""

from __future__ import annotations

import asyncio
import collections


class FairAdmission:
    """About ``slots`` requests in the engine at a time, shared between jobs; ``acquire`` returns the request's
    priority. A job below its share goes in even when others fill every place, so up to about 2 x ``slots`` may be
    in the engine; places are handed on only once fewer than ``slots`` are."""

    def __init__(self, slots: int):
        self.slots = slots
        self.in_engine = 0
        self._held: dict[str, int] = {}  # job -> its requests in the engine
        self._waiting: dict[str, collections.deque[asyncio.Future]] = {}
        self._served: dict[str, int] = {}  # job -> requests admitted while it was active
        self._active: dict[str, int] = {}  # job -> its requests waiting or admitted

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
            if place.done() and not place.cancelled():  # admitted as it was cancelled: pass the place on
                self.release(job)
            else:
                queue = self._waiting.get(job)
                if queue is not None and place in queue:  # ``release`` may have dropped it
                    queue.remove(place)
                    if not queue:
                        del self._waiting[job]
                self._left(job)
            raise

    def release(self, job: str) -> None:
        """Hands freed places to the least-served jobs waiting."""
        self.in_engine -= 1
        self._held[job] -= 1
        if not self._held[job]:
            del self._held[job]
        self._left(job)
        while self._waiting:
            ready = [j for j in self._waiting if self.in_engine < self.slots or self._below_share(j)]
            if not ready:
                return
            nxt = min(ready, key=self._served.__getitem__)  # ties go to the job that waited first
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
        if not self._active[job]:  # a job that comes back starts from nothing
            del self._active[job], self._served[job]


class TokenGate:
    """Holds back new documents while the requests in flight hold ``budget`` tokens of the KV cache, so a document's
    questions are not evicted between one another. A job holding nothing, or less than its share of the budget, may
    always start a document, so a new job beside a big one starts at once; a document larger than the budget still
    runs, alone."""

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
