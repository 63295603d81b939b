"""The dashboard's history, kept on the scheduler: a time series per shard of the figures its
worker publishes, and one of the current job's progress, so that the plots page (opened or
reloaded in the middle of a job) starts with what came before.

``History`` is the state, with no Dask in it: ``add`` takes a worker's snapshot (topic
``pipeline-shard``, ``ShardMetrics.snapshot``), ``sample`` appends one point per shard and
one for the job (from the client's view in the scheduler's metadata), ``points`` returns
the series as columns. Each series holds at most ``max_points`` points (one a second:
the last 30 minutes). ``HistoryPlugin`` is the shell: a scheduler plugin that hands it the
snapshots as they are logged and samples it every second.

A shard's point, over its snapshots of the last ``window_s`` seconds (by the worker's
clock): requests/s and output tokens/s; the engine busy share (the part of that time in
which the engine had at least one request); the prefix-cache hit share of the prompt
tokens of the requests finished then (None when none finished); and its requests queued
and in flight at its latest snapshot. A shard whose worker has sent nothing for
``stale_after_s`` (the scheduler's clock) is idle: its rates are 0.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Sequence

from distributed.diagnostics.plugin import SchedulerPlugin
from tornado.ioloop import PeriodicCallback

from pipeline.names import PUBLISH_INTERVAL_S, SNAPSHOT_TOPIC, VIEW_METADATA_KEY

MAX_POINTS = 1800  # per series: 30 minutes at one point a second
RATE_WINDOW_S = 10.0  # rates over a shard's snapshots of this many seconds
STALE_AFTER_S = 3 * PUBLISH_INTERVAL_S  # a worker that has sent nothing for this long is idle
# (it sends while it works)

SHARD_COLUMNS = ("requests_per_s", "output_tokens_per_s", "cache_hit_share", "engine_busy_share", "queued", "in_flight")
JOB_COLUMNS = ("job", "rows_done", "rows_total", "rows_read", "rows_with_error")


def window_rates(snaps: Sequence[dict]) -> dict:
    """Requests/s, output tokens/s, engine busy share and prefix-cache hit share over a shard's
    snapshots (oldest first, one worker's: its counters only grow). Fewer than two snapshots,
    or none apart in time: zero rates, no hit share."""
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
    """Append a shard's snapshot to its window (oldest first), dropping those more than
    ``window_s`` older; a snapshot whose counters went back is a new worker's (a fresh engine,
    counting from 0): the old worker's snapshots go."""
    if window and (snapshot["requests"] < window[-1]["requests"] or snapshot["time"] < window[-1]["time"]):
        window.clear()
    window.append(snapshot)
    while snapshot["time"] - window[0]["time"] > window_s:
        window.popleft()


class History:
    def __init__(
        self, max_points: int = MAX_POINTS, window_s: float = RATE_WINDOW_S, stale_after_s: float = STALE_AFTER_S
    ):
        self.max_points = max_points
        self.window_s = window_s
        self.stale_after_s = stale_after_s
        self._recent: dict[str, deque[dict]] = {}  # shard -> its snapshots within the rate window
        self._received: dict[str, float] = {}  # shard -> when its latest snapshot came (scheduler clock)
        self.shards: dict[str, deque[tuple]] = {}  # shard -> (seq, time, *SHARD_COLUMNS) points
        self.job: deque[tuple] = deque(maxlen=max_points)  # (seq, time, *JOB_COLUMNS) points
        self.seq = 0  # the latest sample's number (points carry it)

    # -- input ----------------------------------------------------------------------
    def add(self, snapshot: dict, received: float) -> None:
        """A worker's snapshot, as it reached the scheduler at ``received``."""
        shard = snapshot["shard"]
        slide(self._recent.setdefault(shard, deque()), snapshot, self.window_s)
        self._received[shard] = received

    def sample(self, now: float, view: dict | None = None) -> int:
        """One point per shard (those that have published, and those in the client's view)
        and one for the view's job, at ``now``; returns the sample's number."""
        self.seq += 1
        view = view or {}
        for shard in sorted(set(self._recent) | set(view.get("shards") or {})):
            window = self._recent.get(shard)
            if window and now - self._received[shard] <= self.stale_after_s:
                rates = window_rates(window)
            else:
                rates = window_rates(())
            latest = window[-1] if window else {}
            point = {**rates, "queued": latest.get("queued", 0), "in_flight": latest.get("in_flight", 0)}
            series = self.shards.setdefault(shard, deque(maxlen=self.max_points))
            series.append((self.seq, now, *(point[c] for c in SHARD_COLUMNS)))
        job = view.get("job")
        if job:
            self.job.append(
                (
                    self.seq,
                    now,
                    job.get("job"),
                    job.get("rows", 0),
                    job.get("rows_total"),
                    job.get("rows_read"),
                    job.get("rows_with_error"),
                )
            )
        return self.seq

    # -- output ---------------------------------------------------------------------
    def points(self, after: int = 0) -> dict:
        """The points of samples after number ``after`` (0: all that are kept), as columns:
        ``{"seq": n, "shards": {shard: {"seq": [...], "time": [...], column: [...]}}, "job": {...}}``
        (times in seconds since the epoch; a column's missing values are None)."""
        return {
            "seq": self.seq,
            "shards": {name: _columns(series, after, SHARD_COLUMNS) for name, series in self.shards.items()},
            "job": _columns(self.job, after, JOB_COLUMNS),
        }


def _columns(series: deque[tuple], after: int, names: Sequence[str]) -> dict[str, list]:
    new = []
    for point in reversed(series):  # the newest last: read back from the end
        if point[0] <= after:
            break
        new.append(point)
    new.reverse()
    return {name: [p[i] for p in new] for i, name in enumerate(("seq", "time", *names))}


class HistoryPlugin(SchedulerPlugin):
    """Feeds a ``History`` on the scheduler: the workers' snapshots as they are logged, and a
    sample every ``interval_s``."""

    name = "pipeline-dashboard-history"

    def __init__(self, history: History | None = None, interval_s: float = PUBLISH_INTERVAL_S):
        self.history = history or History()
        self.interval_s = interval_s
        self._sampler: PeriodicCallback | None = None

    async def start(self, scheduler) -> None:
        self.scheduler = scheduler
        self._sampler = PeriodicCallback(self.sample, self.interval_s * 1000)
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
