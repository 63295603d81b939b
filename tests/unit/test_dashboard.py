"""The dashboard page's figures from the workers' snapshots (no cluster)."""
import time

from pipeline.cluster.dashboard import render, status


class _SchedulerState:
    """What the page reads from a scheduler: its events and its metadata."""

    def __init__(self, events, view=None):
        self.events, self.view = events, view

    def get_events(self, topic):
        return tuple((m["time"], m) for m in self.events.get(topic, []))

    def get_metadata(self, keys, default=None):
        return self.view if self.view is not None else default


def _snap(shard, t, requests, output_tokens, in_flight=1, busy_s=0.0):
    return {"shard": shard, "time": t, "requests": requests, "output_tokens": output_tokens,
            "queued": 0, "in_flight": in_flight, "engine_busy_s": busy_s}


def test_rates_over_the_recent_window_and_zero_when_idle():
    now = time.time()
    busy = [_snap("cpu0", now - 30, 0, 0)] + [_snap("cpu0", now - 4 + i, 10 * i, 200 * i, busy_s=0.75 * i)
                                                for i in range(5)]
    idle = [_snap("cpu1", now - 20, 5, 50), _snap("cpu1", now - 19, 9, 90, in_flight=0)]
    view = {"shards": {"cpu0": {"documents_bound": 7, "routing": "in"}, "cpu1": {"documents_bound": 3, "routing": "out"}},
            "job": None}
    st = status(_SchedulerState({"pipeline-shard": busy + idle}, view))
    cpu0, cpu1 = st["shards"]["cpu0"], st["shards"]["cpu1"]
    assert abs(cpu0["requests_per_s"] - 10) < 1e-9 and abs(cpu0["output_tokens_per_s"] - 200) < 1e-9
    assert abs(cpu0["engine_busy_share"] - 0.75) < 1e-9  # its engine had work 3 of the last 4 s
    assert cpu0["requests"] == 40 and cpu0["documents_bound"] == 7
    assert cpu1["requests_per_s"] == 0.0 and cpu1["engine_busy_share"] == 0.0 and cpu1["routing"] == "out"
    page = render(st)
    assert "<th>cpu0</th>" in page and "<td>10.0</td>" in page and "<td>0.75</td>" in page and "No job has run yet" in page
