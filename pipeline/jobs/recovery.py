"""Worker loss during a job: notice it, and say what happened.

Dask does the first half itself. A batch task is restricted to its shard's worker
resource; when that worker process dies, the scheduler puts the task back and runs it
again as soon as a worker with the resource is there (the nanny restarts the process
within seconds, and the engine plugin, registered on the scheduler, builds a fresh
engine in it). A batch that kills its worker more than
``distributed.scheduler.allowed-failures`` times fails with ``KilledWorker``.

The client does the rest, with ``ShardWatch``: it polls the scheduler's worker list and
reports, per shard, when its worker left, when a new one can answer in its place (the router
then forgets what that shard had cached), and when a shard has had no worker that can answer
for ``recovery.rejoin_timeout_s`` (no nanny brought it back, or its new engine takes that long
to start: the client takes it out of routing and re-routes its unanswered rows to the surviving
shards). The job's ``JobSummary`` (pipeline/summary.py) tells its caller what happened.

"Can answer" is not "has joined": a restarted worker registers with the scheduler within
seconds and builds its engine only then (the plugin's setup runs after registration), which
takes from seconds to minutes. A worker that joined during the watch is asked for its engine's
phase (``engine_phase``) at each poll until it is ready; the timeout counts from the poll
that first saw the shard's worker gone (or replaced) until then. The workers there when the
watch starts are taken as able to answer (their engines started before the job).
"""

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
        """The shards of ``listed`` (shard -> worker) whose worker's engine is ready; a worker
        not known to be is asked (module docstring)."""
        self.ready &= set(listed.values())  # (a worker that left is forgotten)
        new = [addr for addr in listed.values() if addr not in self.ready]
        if new:
            try:
                phases = self.client.run(engine_phase, workers=new, on_error="return")
            except Exception:  # noqa: BLE001 - e.g. the worker left meanwhile: not ready, asked again next poll
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
    """The scheduler's workers now (address -> info), asked for directly. Not
    ``client.scheduler_info()``: it returns a cache that the client's background refresh
    overwrites, every few seconds, with an identity that lists no workers."""
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]
