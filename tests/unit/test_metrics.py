"""Per-shard counters the dashboard and Prometheus read."""
import time

from pipeline.worker.gcstats import GcPauses
from pipeline.worker.metrics import ShardMetrics


def test_engine_busy_time_counts_overlapping_requests_once_and_not_idle_gaps():
    m = ShardMetrics("s0", GcPauses())
    for _ in range(2):
        m.queue(10)
        m.admit()
    time.sleep(0.2)      # two requests in the engine at once: 0.2 s busy, not 0.4
    m.finish(10, 0, 1, False)
    time.sleep(0.1)
    m.finish(10, 0, 1, False)
    time.sleep(0.3)      # idle: not counted
    busy = m.snapshot()["engine_busy_s"]
    assert 0.29 <= busy < 0.45, busy
    m.queue(5)
    m.admit()
    time.sleep(0.1)      # a busy stretch still running counts up to now
    assert 0.39 <= m.engine_busy_s < 0.6
    m.finish(5, 0, 1, False)
    assert m.requests == 3 and m.in_flight == 0 and m.prefill_outstanding == 0
