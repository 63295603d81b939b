"""The dashboard's history (pipeline/scheduler/history.py) fed synthetic snapshots, and the plots
page drawn from it: no cluster."""

import math

from pipeline.scheduler import history
from pipeline.scheduler.history import History, window_rates


def snap(shard, t, requests, output_tokens=0, *, prompt=0, cached=0, busy_s=0.0, queued=0, in_flight=0):
    return {
        "shard": shard,
        "time": t,
        "requests": requests,
        "output_tokens": output_tokens,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "engine_busy_s": busy_s,
        "queued": queued,
        "in_flight": in_flight,
    }


def view(rows, total=None, errors=0, job="job-1", shards=("s0",)):
    return {
        "job": {"job": job, "rows": rows, "rows_total": total, "rows_read": rows, "rows_with_error": errors},
        "shards": {s: {} for s in shards},
    }


def test_window_rates_over_the_first_and_last_snapshot():
    r = window_rates(
        [
            snap("s0", 100, 10, 100, prompt=1000, cached=0, busy_s=1.0),
            snap("s0", 102, 14, 180, prompt=1400, cached=300, busy_s=2.5),
        ]
    )
    assert r == {"requests_per_s": 2.0, "output_tokens_per_s": 40.0, "engine_busy_share": 0.75, "cache_hit_share": 0.75}
    # no prompt tokens finished in the window: no hit share (a gap in its line), not 0
    assert window_rates([snap("s0", 100, 10), snap("s0", 101, 10)])["cache_hit_share"] is None
    assert window_rates([snap("s0", 100, 10)])["requests_per_s"] == 0.0


def test_each_sample_is_one_point_per_shard_and_one_for_the_job():
    h = History()
    for i in range(6):
        h.add(
            snap("s0", 100 + i, 5 * i, 50 * i, prompt=100 * i, cached=60 * i, busy_s=0.5 * i, queued=3, in_flight=2),
            received=100 + i,
        )
        h.add(snap("s1", 100 + i, 2 * i, 10 * i), received=100 + i)
        h.sample(100.5 + i, view(7 * i, total=100, errors=i // 2, shards=("s0", "s1")))
    p = h.points()
    assert p["seq"] == 6 and set(p["shards"]) == {"s0", "s1"}
    s0 = p["shards"]["s0"]
    assert s0["seq"] == [1, 2, 3, 4, 5, 6] and s0["time"] == [100.5 + i for i in range(6)]
    assert s0["requests_per_s"][-1] == 5.0 and s0["output_tokens_per_s"][-1] == 50.0
    assert s0["cache_hit_share"][0] is None and s0["cache_hit_share"][-1] == 0.6
    assert s0["engine_busy_share"][-1] == 0.5 and s0["queued"][-1] == 3 and s0["in_flight"][-1] == 2
    assert p["shards"]["s1"]["requests_per_s"][-1] == 2.0
    job = p["job"]
    assert job["rows_done"] == [0, 7, 14, 21, 28, 35] and job["rows_total"] == [100] * 6
    assert job["rows_with_error"][-1] == 2 and job["job"] == ["job-1"] * 6


def test_points_after_a_sample_are_only_the_newer_ones():
    h = History()
    for i in range(5):
        h.add(snap("s0", 100 + i, i), received=100 + i)
        h.sample(100 + i, view(i))
    newer = h.points(after=3)
    assert newer["shards"]["s0"]["seq"] == [4, 5] and newer["job"]["rows_done"] == [3, 4]
    assert h.points(after=5)["shards"]["s0"]["seq"] == [] and h.points(after=5)["job"]["seq"] == []


def test_the_history_is_bounded(monkeypatch):
    monkeypatch.setattr(history, "MAX_POINTS", 50)
    h = History()
    for i in range(200):
        h.add(snap("s0", 100 + i, i), received=100 + i)
        h.sample(100 + i, view(i))
    p = h.points()
    assert len(p["shards"]["s0"]["seq"]) == 50 and p["shards"]["s0"]["seq"][0] == 151
    assert len(p["job"]["seq"]) == 50 and p["job"]["rows_done"][-1] == 199


def test_a_worker_that_stopped_sending_is_idle_and_a_new_one_starts_its_counters_again():
    h = History()
    for i in range(4):
        h.add(snap("s0", 100 + i, 10 * i, in_flight=0 if i == 3 else 4), received=100 + i)
    h.sample(103.5)
    assert h.points()["shards"]["s0"]["requests_per_s"] == [10.0]
    h.sample(110)  # nothing since 103: idle
    assert h.points(after=1)["shards"]["s0"]["requests_per_s"] == [0.0]
    assert h.points(after=1)["shards"]["s0"]["in_flight"] == [0]
    # a restarted worker counts from 0: its rate is not the difference with the old one's counters
    h.add(snap("s0", 111, 0), received=111)
    h.add(snap("s0", 112, 3), received=112)
    h.sample(112.5)
    assert h.points(after=2)["shards"]["s0"]["requests_per_s"] == [3.0]


def test_a_shard_known_only_from_the_clients_view_has_zero_points_and_no_job_means_no_job_point():
    h = History()
    h.sample(100, {"shards": {"s0": {}}, "job": None})
    p = h.points()
    assert p["shards"]["s0"]["requests_per_s"] == [0.0] and p["shards"]["s0"]["queued"] == [0]
    assert p["job"]["seq"] == []
    h.sample(101, None)  # no view any more, and s0 never published: no point for it
    assert h.points()["seq"] == 2 and h.points()["shards"]["s0"]["seq"] == [1]


def test_the_plots_page_starts_with_the_history_and_streams_only_newer_points():
    from pipeline.scheduler.dashboard_plots import PipelinePlots

    h = History()
    for i in range(3):
        h.add(snap("s0", 100 + i, 4 * i, prompt=10 * i, cached=5 * i, in_flight=2), received=100 + i)
        h.sample(100 + i, view(i, total=10))
    page = PipelinePlots(h)  # a page opened (or reloaded) now: the history so far
    s0 = page.sources["s0"].data
    assert s0["time"] == [100_000, 101_000, 102_000]  # Bokeh's datetimes: ms
    assert math.isnan(s0["cache_hit_share"][0]) and s0["cache_hit_share"][-1] == 0.5  # no share yet: a gap
    assert page.job_source.data["rows_done"] == [0, 1, 2] and "2</b> of 10 rows answered (20.0 %)" in page.summary.text
    # a shard that starts later gets its lines on every shard plot, with a legend entry
    h.add(snap("s1", 103, 1), received=103)
    h.sample(103, view(3, total=10, shards=("s0", "s1")))
    page.update()
    assert len(page.sources["s0"].data["time"]) == 4 and page.sources["s1"].data["time"] == [103_000]
    labels = [item.label["value"] for item in page.figures["requests"].legend[0].items]
    assert labels == ["s0", "s1"]
    page.update()  # nothing new: nothing streamed twice
    assert len(page.sources["s0"].data["time"]) == 4 and len(page.job_source.data["time"]) == 4
