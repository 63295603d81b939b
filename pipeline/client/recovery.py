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
routing and re-routes its unanswered rows to the surviving shards). ``JobReport`` is
what the job tells its caller.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from distributed import Client

LOST, REJOINED, GONE = "lost", "rejoined", "gone"


@dataclass
class ShardEvent:
    kind: str        # LOST: its worker left; REJOINED: a new worker serves it; GONE: given up on
    shard: str
    worker: str | None
    at: float        # time.time()


@dataclass
class JobReport:
    """What happened during one ``Pipeline.stream`` job."""
    job: str
    rows: int = 0                     # rows answered (each exactly once), with or without error
    batches: int = 0                  # batches submitted, retries included
    events: list[ShardEvent] = field(default_factory=list)
    batches_interrupted: int = 0      # in flight on a worker when it was lost (Dask runs them again, or their rows are re-routed)
    batches_failed: int = 0           # batches whose task failed (KilledWorker, engine died)
    rows_rerouted: int = 0            # rows sent again, to another shard or a fresh engine
    rows_failed: int = 0              # rows answered with a worker error after all retries
    duplicates_dropped: int = 0       # results for rows already answered (never yielded twice)
    rows_read: int = 0                # rows read from the input so far
    rows_total: int | None = None     # rows in the input: known up front (a sized input) or once it is all read
    rows_with_error: int = 0          # rows answered with an error (input, engine or worker)

    @property
    def workers_lost(self) -> int:
        return sum(e.kind == LOST for e in self.events)

    def summary(self) -> str:
        parts = [f"{self.rows} rows", f"{self.batches} batches"]
        if self.events:
            parts += [f"{self.workers_lost} worker(s) lost", f"{self.batches_interrupted} batch(es) interrupted",
                      f"{self.rows_rerouted} row(s) re-routed", f"{self.rows_failed} row(s) failed"]
            parts += [f"{e.kind}: {e.shard} ({e.worker})" for e in self.events]
        return "; ".join(parts)

    def as_dict(self) -> dict:
        return {"job": self.job, "rows": self.rows, "batches": self.batches, "workers_lost": self.workers_lost,
                "batches_interrupted": self.batches_interrupted, "batches_failed": self.batches_failed,
                "rows_rerouted": self.rows_rerouted, "rows_failed": self.rows_failed,
                "duplicates_dropped": self.duplicates_dropped, "rows_read": self.rows_read,
                "rows_total": self.rows_total, "rows_with_error": self.rows_with_error,
                "events": [{"kind": e.kind, "shard": e.shard, "worker": e.worker, "at": e.at} for e in self.events]}


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
