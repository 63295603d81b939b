"""The dashboard page's figures from the workers' snapshots (no cluster)."""

import json
import time

from pipeline.scheduler.dashboard import render, status


class _SchedulerState:
    """What the page reads from a scheduler: its events and its metadata."""

    def __init__(self, events, view=None):
        self.events, self.view = events, view

    def get_events(self, topic):
        return tuple((m["time"], m) for m in self.events.get(topic, []))

    def get_metadata(self, keys, default=None):
        return self.view if self.view is not None else default


def _snap(shard, t, requests, output_tokens, in_flight=1, busy_s=0.0):
    return {
        "shard": shard,
        "time": t,
        "requests": requests,
        "output_tokens": output_tokens,
        "queued": 0,
        "in_flight": in_flight,
        "engine_busy_s": busy_s,
    }


def test_rates_over_the_recent_window_and_zero_when_idle():
    now = time.time()
    busy = [_snap("cpu0", now - 30, 0, 0)] + [
        _snap("cpu0", now - 4 + i, 10 * i, 200 * i, busy_s=0.75 * i) for i in range(5)
    ]
    idle = [_snap("cpu1", now - 20, 5, 50), _snap("cpu1", now - 19, 9, 90, in_flight=0)]
    view = {"job": None}
    st = status(_SchedulerState({"pipeline-shard": busy + idle}, view))
    cpu0, cpu1 = st["shards"]["cpu0"], st["shards"]["cpu1"]
    assert abs(cpu0["requests_per_s"] - 10) < 1e-9 and abs(cpu0["output_tokens_per_s"] - 200) < 1e-9
    assert abs(cpu0["engine_busy_share"] - 0.75) < 1e-9  # its engine had work 3 of the last 4 s
    assert cpu0["requests"] == 40
    assert cpu1["requests_per_s"] == 0.0 and cpu1["engine_busy_share"] == 0.0
    page = render(st)
    assert (
        "<th>cpu0</th>" in page and "<td>10.0</td>" in page and "<td>0.75</td>" in page and "No job has run yet" in page
    )


def test_a_restarted_workers_counters_do_not_make_negative_rates():
    now = time.time()
    old = [_snap("cpu0", now - 3, 500, 9000), _snap("cpu0", now - 2, 510, 9200)]
    new = [_snap("cpu0", now - 1, 0, 0), _snap("cpu0", now, 4, 80)]  # a fresh worker counts from 0
    st = status(_SchedulerState({"pipeline-shard": old + new}))
    assert st["shards"]["cpu0"]["requests_per_s"] == 4.0 and st["shards"]["cpu0"]["requests"] == 4


def _scheduler_pages(dashboard: bool, paths=("/pipeline", "/pipeline/table", "/pipeline/status.json", "/status")):
    """A scheduler started with the pipeline's preload (in this process): the addresses its HTTP
    server is bound to, each path's status and body, its plugins."""
    import asyncio
    import urllib.error
    import urllib.request

    from distributed import Scheduler

    def get(url):
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""

    async def main():
        async with Scheduler(
            host="127.0.0.1",
            port=0,
            dashboard=dashboard,
            dashboard_address="127.0.0.1:0",
            preload=["pipeline.scheduler.preload"],
        ) as s:
            bound = [sock.getsockname()[:2] for sock in s.http_server._sockets.values()]
            port = bound[0][1]
            loop = asyncio.get_running_loop()
            pages = {p: await loop.run_in_executor(None, get, f"http://127.0.0.1:{port}{p}") for p in paths}
            return {host for host, _ in bound}, pages, set(s.plugins)

    return asyncio.run(main())


def test_the_plots_page_is_served_with_the_dashboard_and_linked_from_dasks_pages():
    hosts, pages, plugins = _scheduler_pages(dashboard=True)
    assert hosts == {"127.0.0.1"}  # the page adds no server of its own
    code, page = pages["/pipeline"]
    assert code == 200 and "Bokeh.embed.embed_items" in page  # a Bokeh server page (its plots come over a websocket)
    assert 'href="pipeline"' in page  # the navigation bar: Dask's, with the pipeline's entry
    assert 'href="pipeline"' in pages["/status"][1]  # and on Dask's own pages
    assert pages["/pipeline/table"][0] == 200 and "<h1>Pipeline shards</h1>" in pages["/pipeline/table"][1]
    assert json.loads(pages["/pipeline/status.json"][1])["shards"] == {}
    assert "pipeline-dashboard-history" in plugins


def test_without_the_dashboard_there_is_no_plots_page_but_the_table_and_json_stay():
    hosts, pages, plugins = _scheduler_pages(dashboard=False)
    assert hosts == {"127.0.0.1"}
    assert pages["/pipeline"][0] == 404 and pages["/status"][0] == 404
    assert pages["/pipeline/table"][0] == 200 and pages["/pipeline/status.json"][0] == 200
    assert "pipeline-dashboard-history" not in plugins


def test_a_jobs_title_is_shown_beside_its_id():
    from pipeline.summary import JobSummary

    job = JobSummary(job="pipeline-job-0123456789ab", title="batch batch_<x>", rows=3).as_dict()
    page = render(status(_SchedulerState({}, {"job": job, "time": time.time()})))
    assert "<code>pipeline-job-0123456789ab</code> (batch batch_&lt;x&gt;)" in page
    untitled = JobSummary(job="pipeline-job-0123456789ab").as_dict()
    page = render(status(_SchedulerState({}, {"job": untitled, "time": time.time()})))
    assert "<code>pipeline-job-0123456789ab</code> (a Dask span" in page
