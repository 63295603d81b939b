"""The dashboard's history, kept on the scheduler so the plots page, opened mid-job, starts with what came before.

``History`` holds a time series per shard of the figures its worker publishes, and one of the current job's
progress; it has no Dask in it. ``HistoryPlugin`` feeds it the snapshots as they are logged and samples it every
second. A shard whose worker has sent nothing for ``STALE_AFTER_S`` counts as idle."""

from __future__ import annotations

import time
from collections import deque
from itertools import takewhile
from typing import Sequence

from distributed.diagnostics.plugin import SchedulerPlugin
from tornado.ioloop import PeriodicCallback

from pipeline.names import PUBLISH_INTERVAL_S, SNAPSHOT_TOPIC, VIEW_METADATA_KEY

MAX_POINTS = 1800  # per series: 30 minutes at one point a second
RATE_WINDOW_S = 10.0  # rates over a shard's snapshots of this many seconds
STALE_AFTER_S = 3 * PUBLISH_INTERVAL_S  # a worker that has sent nothing for this long is idle

SHARD_COLUMNS = ("requests_per_s", "output_tokens_per_s", "cache_hit_share", "engine_busy_share", "queued", "in_flight")
JOB_COLUMNS = ("job", "rows_done", "rows_total", "rows_read", "rows_with_error")


def window_rates(snaps: Sequence[dict]) -> dict:
    """Rates and shares over one worker's snapshots, oldest first, whose counters only grow. Fewer than two
    snapshots give zero rates and no hit share."""
    out = {"requests_per_s": 0.0, "output_tokens_per_s": 0.0, "engine_busy_share": 0.0, "cache_hit_share": None}
    if len(snaps) < 2 or snaps[-1]["time"] <= snaps[0]["time"]:
        return out
    first, last = snaps[0], snaps[-1]
    dt = last["time"] - first["time"]
    out["requests_per_s"] = (last["requests"] - first["requests"]) / dt
    out["output_tokens_per_s"] = (last["output_tokens"] - first["output_tokens"]) / dt
    if "engine_busy_s" in first and "engine_busy_s" in last:
        out["engine_busy_share"] = min(1.0, (last["engine_busy_s"] - first["engine_busy_s"]) / dt)
    prompt = last.get("prompt_tokens", 0) - first.get("prompt_tokens", 0)
    if prompt > 0:
        out["cache_hit_share"] = (last.get("cached_tokens", 0) - first.get("cached_tokens", 0)) / prompt
    return out


def slide(window: deque, snapshot: dict, window_s: float) -> None:
    """Appends a snapshot and drops those older than ``window_s``. Counters that went back mean a new worker with a
    fresh engine, so the old worker's snapshots go."""
    if window and (snapshot["requests"] < window[-1]["requests"] or snapshot["time"] < window[-1]["time"]):
        window.clear()
    window.append(snapshot)
    while snapshot["time"] - window[0]["time"] > window_s:
        window.popleft()


class History:
    def __init__(self) -> None:
        self.max_points = MAX_POINTS
        self._recent: dict[str, deque[dict]] = {}  # shard -> its snapshots within the rate window
        self._received: dict[str, float] = {}  # shard -> when its latest snapshot came (scheduler clock)
        self.shards: dict[str, deque[tuple]] = {}  # shard -> (seq, time, *SHARD_COLUMNS) points
        self.job: deque[tuple] = deque(maxlen=self.max_points)  # (seq, time, *JOB_COLUMNS) points
        self.seq = 0  # the latest sample's number (points carry it)

    def add(self, snapshot: dict, received: float) -> None:
        shard = snapshot["shard"]
        slide(self._recent.setdefault(shard, deque()), snapshot, RATE_WINDOW_S)
        self._received[shard] = received

    def sample(self, now: float, view: dict | None = None) -> int:
        """Appends one point per shard, published or in the client's view, and one for the job; returns the sample's
        number."""
        self.seq += 1
        view = view or {}
        for shard in sorted(set(self._recent) | set(view.get("shards") or {})):
            window = self._recent.get(shard)
            rates = window_rates(window if window and now - self._received[shard] <= STALE_AFTER_S else ())
            latest = window[-1] if window else {}
            point = {**rates, "queued": latest.get("queued", 0), "in_flight": latest.get("in_flight", 0)}
            series = self.shards.setdefault(shard, deque(maxlen=self.max_points))
            series.append((self.seq, now, *(point[c] for c in SHARD_COLUMNS)))
        job = view.get("job")
        if job:
            # the view counts the rows answered as "rows"
            self.job.append((self.seq, now, job.get("job"), job.get("rows", 0), *map(job.get, JOB_COLUMNS[2:])))
        return self.seq

    def points(self, after: int = 0) -> dict:
        """The points after sample ``after`` as columns, times in seconds since the epoch."""
        return {
            "seq": self.seq,
            "shards": {name: _columns(series, after, SHARD_COLUMNS) for name, series in self.shards.items()},
            "job": _columns(self.job, after, JOB_COLUMNS),
        }


def _columns(series: deque[tuple], after: int, names: Sequence[str]) -> dict[str, list]:
    new = list(takewhile(lambda point: point[0] > after, reversed(series)))[::-1]  # the newest last: read from the end
    return {name: [p[i] for p in new] for i, name in enumerate(("seq", "time", *names))}


class HistoryPlugin(SchedulerPlugin):
    """Feeds a ``History`` the workers' snapshots as they are logged, and samples it every ``PUBLISH_INTERVAL_S``."""

    name = "pipeline-dashboard-history"

    def __init__(self) -> None:
        self.history = History()
        self._sampler: PeriodicCallback | None = None

    async def start(self, scheduler) -> None:
        self.scheduler = scheduler
        self._sampler = PeriodicCallback(self.sample, PUBLISH_INTERVAL_S * 1000)
        self._sampler.start()

    def log_event(self, topic: str, msg) -> None:
        if topic == SNAPSHOT_TOPIC and isinstance(msg, dict) and "shard" in msg:
            self.history.add(msg, time.time())

    def sample(self) -> None:
        view = self.scheduler.get_metadata([VIEW_METADATA_KEY], default=None)
        self.history.sample(time.time(), view if isinstance(view, dict) else None)

    async def close(self) -> None:
        if self._sampler is not None:
            self._sampler.stop()
