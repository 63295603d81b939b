"""Worker loss during a job: notice it, and say what happened.

Dask does the first half itself. A batch task is restricted to its shard's worker
resource; when that worker process dies, the scheduler puts the task back and runs it
again as soon as a worker with the resource is there (the nanny restarts the process
within seconds, and the engine plugin, registered on the scheduler, builds a fresh
engine in it). A batch that kills its worker more than
``distributed.scheduler.allowed-failures`` times fails with ``KilledWorker``.

The client does the rest, with ``ShardWatch``: it polls the scheduler's worker list and
reports, per shard, when its worker left, when a new one took its place (the router then
forgets what that shard had cached), and when a shard has had no worker for
``recovery.rejoin_timeout_s`` (no nanny brought it back: the client takes it out of
routing and re-routes its unanswered rows to the surviving shards). The job's
``JobSummary`` (pipeline/summary.py) tells its caller what happened.
"""
from __future__ import annotations

import time

from distributed import Client

from pipeline.summary import GONE, LOST, REJOINED, ShardEvent

class ShardWatch:
    """Which worker serves each shard, polled from the scheduler at most every ``interval_s``."""

    def __init__(self, client: Client, resources: dict[str, str], interval_s: float, rejoin_timeout_s: float):
        self.client = client
        self.resources = resources          # shard -> its worker resource name
        self.interval_s = interval_s
        self.rejoin_timeout_s = rejoin_timeout_s
        self._last_poll = 0.0
        self.workers = self._serving()      # shard -> worker address
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

    def poll(self, now: float | None = None) -> list[ShardEvent]:
        now = time.monotonic() if now is None else now
        if now - self._last_poll < self.interval_s:
            return []
        self._last_poll = now
        serving = self._serving()
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
            if new is None and shard not in self.gone and shard in self.missing_since \
                    and now - self.missing_since[shard] >= self.rejoin_timeout_s:
                events.append(ShardEvent(GONE, shard, self.last_seen.get(shard), time.time()))
                self.gone.add(shard)
        self.workers = serving
        self.last_seen.update(serving)
        return events


def current_workers(client: Client) -> dict[str, dict]:
    """The scheduler's workers now (address -> info), asked for directly. Not
    ``client.scheduler_info()``: it returns a cache that the client's background refresh
    overwrites, every few seconds, with an identity that lists no workers."""
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]
