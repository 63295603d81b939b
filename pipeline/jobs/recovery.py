"""Watches the shards' workers during a job so that a lost shard's buckets can move. Dask reruns a lost worker's
tasks once a worker with its resource is back; ``ShardWatch`` reports when a worker left, when a new one can
answer, and when a shard has had none for ``recovery.rejoin_timeout_s``. A restarted worker registers within
seconds but builds its engine afterwards, which can take minutes, so it counts only once its engine is ready."""

from __future__ import annotations

import time

from distributed import Client

from pipeline.summary import GONE, LOST, REJOINED, ShardEvent
from pipeline.worker.queries import engine_phase


class ShardWatch:
    """Which worker answers for each shard, polled from the scheduler at most every ``interval_s``."""

    def __init__(self, client: Client, resources: dict[str, str], interval_s: float, rejoin_timeout_s: float):
        self.client = client
        self.resources = resources  # shard -> its worker resource name
        self.interval_s = interval_s
        self.rejoin_timeout_s = rejoin_timeout_s
        self._last_poll = 0.0
        self.workers = self._serving()  # shard -> address of the worker that answers for it
        self.ready = set(self.workers.values())  # the workers whose engine can answer
        self.last_seen = dict(self.workers)
        self.missing_since: dict[str, float] = {}
        self.gone: set[str] = set()

    def _serving(self) -> dict[str, str]:
        out = {}
        for addr, w in current_workers(self.client).items():
            for shard, res in self.resources.items():
                if res in (w.get("resources") or {}):
                    out[shard] = addr
        return out

    def _answering(self, listed: dict[str, str]) -> dict[str, str]:
        """The shards of ``listed`` whose worker's engine is ready; a worker not yet known to be ready is asked."""
        self.ready &= set(listed.values())  # forget the workers that left
        new = [addr for addr in listed.values() if addr not in self.ready]
        if new:
            try:
                phases = self.client.run(engine_phase, workers=new, on_error="return")
            except Exception:  # noqa: BLE001 - it may have left; it is asked again next poll
                phases = {}
            self.ready.update(addr for addr, p in phases.items() if isinstance(p, dict) and p.get("phase") == "ready")
        return {shard: addr for shard, addr in listed.items() if addr in self.ready}

    def poll(self, now: float | None = None) -> list[ShardEvent]:
        now = time.monotonic() if now is None else now
        if now - self._last_poll < self.interval_s:
            return []
        self._last_poll = now
        serving = self._answering(self._serving())
        events = []
        for shard in self.resources:
            old, new = self.workers.get(shard), serving.get(shard)
            if old is not None and old != new:
                events.append(ShardEvent(LOST, shard, old, time.time()))
                self.missing_since[shard] = now
            if new is not None and new != old:
                events.append(ShardEvent(REJOINED, shard, new, time.time()))
                self.missing_since.pop(shard, None)
                self.gone.discard(shard)
            if (
                new is None
                and shard not in self.gone
                and shard in self.missing_since
                and now - self.missing_since[shard] >= self.rejoin_timeout_s
            ):
                events.append(ShardEvent(GONE, shard, self.last_seen.get(shard), time.time()))
                self.gone.add(shard)
        self.workers = serving
        self.last_seen.update(serving)
        return events


def current_workers(client: Client) -> dict[str, dict]:
    """The scheduler's workers, asked for directly: ``client.scheduler_info()`` is a cache that a background refresh
    overwrites with an identity listing no workers."""
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]
