"""Per-shard counters the dashboard and Prometheus read."""

import pytest

from pipeline.worker.gcstats import GcPauses
from pipeline.worker.metrics import ShardMetrics


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_engine_busy_time_counts_overlapping_requests_once_and_not_idle_gaps():
    clock = Clock()
    m = ShardMetrics("s0", GcPauses(), clock=clock)
    for _ in range(2):
        m.queue(10)
        m.admit()
    clock.sleep(0.2)  # two requests in the engine at once: 0.2 s busy, not 0.4
    m.finish(10, 0, 1, False)
    clock.sleep(0.1)
    m.finish(10, 0, 1, False)
    clock.sleep(0.3)  # idle: not counted
    assert m.snapshot()["engine_busy_s"] == pytest.approx(0.3)
    m.queue(5)
    m.admit()
    clock.sleep(0.1)  # a busy stretch still running counts up to now
    assert m.engine_busy_s == pytest.approx(0.4)
    clock.sleep(0.5)
    m.finish(5, 0, 1, False)
    clock.sleep(2.0)  # idle again
    assert m.engine_busy_s == pytest.approx(0.9)
    assert m.requests == 3 and m.in_flight == 0 and m.prefill_outstanding == 0
