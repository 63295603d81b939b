"""Per-shard figures counted on the worker, for the dashboard and Prometheus. ``snapshot()`` is what the worker
sends the scheduler every second; ``collect`` serves the same figures on the worker's own ``/metrics``, which
Dask's HTTP server already serves from prometheus_client's default registry."""

from __future__ import annotations

import contextlib
import time

from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily

from pipeline.worker.gcstats import GcPauses

# What ``/metrics`` serves: (kind, name after "pipeline_", help, the snapshot's key)
FIGURES = (
    ("gauge", "requests_queued", "Requests of running batches waiting to be admitted to the engine", "queued"),
    ("gauge", "requests_in_flight", "Requests admitted to the engine and not finished", "in_flight"),
    ("gauge", "prefill_tokens_outstanding", "Prompt tokens of queued and in-flight requests", "prefill_outstanding"),
    ("gauge", "prefix_cache_hit_ratio", "Share of prompt tokens served from the prefix cache", "cache_hit_share"),
    ("counter", "requests", "Requests finished (answered or failed)", "requests"),
    ("counter", "request_errors", "Requests that failed in the engine", "errors"),
    ("counter", "prompt_tokens", "Prompt tokens of finished requests", "prompt_tokens"),
    ("counter", "cached_prompt_tokens", "Prompt tokens served from the prefix cache", "cached_tokens"),
    ("counter", "output_tokens", "Generated tokens", "output_tokens"),
    ("counter", "batches", "Batches (Dask tasks) finished", "batches"),
    ("counter", "gc_collections", "Garbage collections in the worker process", "gc_collections"),
    ("counter", "gc_pause_seconds", "Time spent in garbage collection (wall clock)", "gc_pause_s"),
    ("gauge", "gc_max_pause_seconds", "Longest garbage-collection pause", "gc_max_pause_s"),
    ("counter", "engine_builds", "Engines built in this worker process", "engine_builds"),
    ("counter", "engine_busy_seconds", "Time with at least one request in the engine", "engine_busy_s"),
)
FAMILIES = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily}


class ShardMetrics:
    def __init__(self, shard: str, gc_pauses: GcPauses, clock=time.perf_counter):
        self.shard = shard
        self.gc = gc_pauses
        self.clock = clock  # seconds, for the engine's busy time
        self.queued = 0  # requests of running batches waiting for intake
        self.in_flight = 0  # requests admitted to the engine, not finished
        self.prefill_outstanding = 0  # prompt tokens of queued + in-flight requests
        self.requests = 0  # finished requests (answered or failed)
        self.errors = 0
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.output_tokens = 0
        self.batches = 0
        self.engine_builds = 0
        self.engine_start_s = 0.0
        self._busy_s = 0.0  # finished busy stretches
        self._busy_since = 0.0

    def queue(self, prompt_tokens: int) -> None:
        self.queued += 1
        self.prefill_outstanding += prompt_tokens

    def admit(self) -> None:
        self.queued -= 1
        if not self.in_flight:
            self._busy_since = self.clock()
        self.in_flight += 1

    def finish(self, prompt_tokens: int, cached: int, output: int, error: bool) -> None:
        self.abort(prompt_tokens)
        self.requests += 1
        self.errors += error
        self.prompt_tokens += prompt_tokens
        self.cached_tokens += cached
        self.output_tokens += output

    def abort(self, prompt_tokens: int) -> None:
        """A request in flight stopped unanswered because its task was released: neither served nor an error."""
        self.in_flight -= 1
        if not self.in_flight:
            self._busy_s += self.clock() - self._busy_since
        self.prefill_outstanding -= prompt_tokens

    @property
    def cache_hit_share(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def engine_busy_s(self) -> float:
        """Time the engine has had work, including the current busy stretch."""
        return self._busy_s + (self.clock() - self._busy_since if self.in_flight else 0.0)

    def snapshot(self) -> dict:
        return {
            "shard": self.shard,
            "time": time.time(),
            "queued": self.queued,
            "in_flight": self.in_flight,
            "prefill_outstanding": self.prefill_outstanding,
            "requests": self.requests,
            "errors": self.errors,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "output_tokens": self.output_tokens,
            "batches": self.batches,
            "cache_hit_share": self.cache_hit_share,
            "gc_collections": self.gc.collections_total,
            "gc_pause_s": self.gc.pause_ms_total / 1000,
            "gc_max_pause_s": self.gc.max_ms_total / 1000,
            "engine_builds": self.engine_builds,
            "engine_start_s": self.engine_start_s,
            "engine_busy_s": self.engine_busy_s,
        }

    def describe(self) -> list:
        """What prometheus_client reads at registration: nothing, as the figures change."""
        return []

    def collect(self):
        """The figures as prometheus_client reads them at each scrape."""
        snapshot = self.snapshot()
        for kind, name, doc, key in FIGURES:
            metric = FAMILIES[kind](f"pipeline_{name}", doc, labels=["shard"])
            metric.add_metric([self.shard], snapshot[key])
            yield metric


def install(metrics: ShardMetrics) -> None:
    """Exposes ``metrics`` on this process's ``/metrics``."""
    REGISTRY.register(metrics)


def uninstall(metrics: ShardMetrics) -> None:
    with contextlib.suppress(KeyError):
        REGISTRY.unregister(metrics)
