"""The whole client/Dask/worker path with the fake engine (no vLLM): plumbing only."""

import gc
import json
import re
import time
import urllib.request

import dask
import pytest

from pipeline import Pipeline, load_config
from pipeline.bench.workloads import document_questions
from pipeline.results import ErrorKind


@pytest.fixture(scope="module")
def null_pipeline():
    config = load_config().replace(scheduler={"dashboard_address": "127.0.0.1:0"}, intake={"read_ahead_rows": 50})
    with Pipeline(config, engine="fake") as p:
        yield p


def test_every_row_once_with_its_id_in_order(null_pipeline):
    rows = document_questions(30, 4, seed=1, order="shuffled")
    results = null_pipeline.run(rows)
    assert [r.id for r in results] == [row["id"] for row in rows]
    assert all(r.error is None and r.shard in ("cpu0", "cpu1") for r in results)


def test_generator_input_is_read_ahead_in_a_bounded_window(null_pipeline):
    pulled = 0
    high_water = 0
    answered = 0

    def rows():
        nonlocal pulled
        for row in document_questions(100, 3, seed=2, order="shuffled"):
            pulled += 1
            yield row

    for _ in null_pipeline.stream(rows()):
        answered += 1
        high_water = max(high_water, pulled - answered)
    assert answered == pulled == 300
    # the window being answered (50 rows) and the next one, read meanwhile: far below the
    # 300 rows of the input
    assert high_water <= 2 * 50


def test_the_client_lets_go_of_each_window_once_it_is_answered(null_pipeline):
    """A long stream's windows do not pile up in the client (issue 56: Dask keeps a job's progress
    handler after it ends; a window's prompt rows are the cluster's once submitted)."""
    from pipeline.client.iterable_job import Window
    from pipeline.steps.prompt_table import PromptRows

    def live(kind) -> int:
        return sum(isinstance(o, kind) for o in gc.get_objects())

    most_windows = most_rows = 0
    for n, _ in enumerate(null_pipeline.stream(document_questions(100, 4, seed=3, order="shuffled"))):
        if n % 20 == 0:  # (8 windows of 50 rows)
            most_windows, most_rows = max(most_windows, live(Window)), max(most_rows, live(PromptRows))
    gc.collect()
    # the window answered and the next, read meanwhile (a moment three, as one replaces the other)
    assert most_windows <= 3 and most_rows <= 3
    assert live(Window) == live(PromptRows) == 0


def test_rows_without_id_get_their_position_and_bad_rows_an_error(null_pipeline):
    rows = [
        {"document": "d1", "question": "q1"},
        {"document": None, "question": "q"},
        {"document": "d1", "question": 7},
        {"document": "d2", "question": "q2"},
    ]
    results = null_pipeline.run(rows)
    assert [r.id for r in results] == [0, 1, 2, 3]
    assert [r.error for r in results] == [
        None,
        "input: document is null",
        "input: question is not text (got int)",
        None,
    ]
    assert [r.error_kind for r in results] == [None, ErrorKind.INPUT, ErrorKind.INPUT, None]


def _documents_stay_on_one_shard(p, seed):
    rows = document_questions(20, 5, seed=seed, order="shuffled")
    results = p.run(rows)
    shards = {}
    for row, r in zip(rows, results):
        shards.setdefault(row["doc_id"], set()).add(r.shard)
    assert all(len(s) == 1 for s in shards.values())
    assert {s for v in shards.values() for s in v} == {"cpu0", "cpu1"}


def test_documents_stay_on_one_shard(null_pipeline):
    _documents_stay_on_one_shard(null_pipeline, seed=3)


def _get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read().decode()


def _dashboard_base(p):
    return p.dashboard_link.rsplit("/", 1)[0]


def test_dashboard_page_shows_each_shard_and_the_job(null_pipeline):
    rows = document_questions(12, 3, seed=4, order="shuffled")
    null_pipeline.run(rows)
    base = _dashboard_base(null_pipeline)
    assert base.startswith("http://127.0.0.1:")
    deadline = time.monotonic() + 10
    while True:  # workers publish their figures every second, and once more when idle
        status = json.loads(_get(base + "/pipeline/status.json")[1])
        shards = status["shards"]
        settled = all(
            shards.get(s, {}).get("requests", 0) > 0
            and shards[s].get("queued") == 0
            and shards[s].get("in_flight") == 0
            for s in ("cpu0", "cpu1")
        )
        if settled or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert set(shards) == {"cpu0", "cpu1"}
    # every row was counted by the worker that answered it
    assert sum(s["requests"] for s in shards.values()) >= len(rows)
    assert all(s["queued"] == 0 and s["in_flight"] == 0 for s in shards.values())
    assert status["job"]["rows"] == len(rows) and status["job"]["job"] == null_pipeline.last_report.job
    code, page = _get(base + "/pipeline/table")
    assert code == 200
    for text in (
        "cpu0",
        "cpu1",
        "prefill tokens outstanding",
        "prefix-cache hit share",
        "requests/s",
        "output tokens/s",
        "GC max pause",
        null_pipeline.last_report.job,
    ):
        assert text in page


def test_each_job_is_a_dask_span(null_pipeline):
    null_pipeline.run(document_questions(4, 2, seed=8))
    job = null_pipeline.last_report.job

    def span_names(dask_scheduler):
        return [list(s.name) for s in dask_scheduler.extensions["spans"].spans.values()]

    assert [job] in null_pipeline.client.run_on_scheduler(span_names)


def test_workers_expose_shard_metrics_to_prometheus(null_pipeline):
    null_pipeline.run(document_questions(6, 2, seed=9))

    def metrics_url(dask_worker):
        return f"http://{dask_worker.ip}:{dask_worker.http_server.port}/metrics"

    urls = null_pipeline.client.run(metrics_url)
    seen = {}
    for url in urls.values():
        assert url.startswith("http://127.0.0.1:")
        text = _get(url)[1]
        for name in (
            "pipeline_requests_queued",
            "pipeline_requests_in_flight",
            "pipeline_prefill_tokens_outstanding",
            "pipeline_prefix_cache_hit_ratio",
            "pipeline_output_tokens_total",
            "pipeline_gc_pause_seconds_total",
            "pipeline_engine_busy_seconds_total",
        ):
            assert name in text, name
        m = re.search(r'^pipeline_requests_total\{shard="(\w+)"\} (\S+)$', text, re.M)
        seen[m.group(1)] = float(m.group(2))
    assert set(seen) == {"cpu0", "cpu1"} and all(v > 0 for v in seen.values())


def test_every_listening_socket_is_on_loopback(null_pipeline):
    import psutil

    def listening(pid):
        return [c.laddr for c in psutil.Process(pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]

    # this process runs the nannies; the scheduler (and its dashboard) and the workers run apart
    tree = [psutil.Process(), *psutil.Process().children(recursive=True)]
    sockets = [a for p in tree for a in listening(p.pid)]
    assert len(sockets) >= 2 + 2 * 2  # scheduler + dashboard, and per worker its comm + /metrics
    assert {a.ip for a in sockets} == {"127.0.0.1"}, sockets


def test_shard_watch_sees_no_worker_come_and_go_when_none_did(null_pipeline):
    """Dask's client refreshes its cached scheduler identity in the background without the
    worker list; the watch must not read that cache (it once saw every worker 'lost' and
    'rejoined' at the same address)."""
    from distributed import Client

    from pipeline.jobs.recovery import ShardWatch

    with dask.config.set({"distributed.client.scheduler-info-interval": "2ms"}):
        client = Client(null_pipeline.client.scheduler.address)
    try:
        resources = {s.name: s.resource for s in null_pipeline.config.shards}
        watch = ShardWatch(client, resources, interval_s=0.0, rejoin_timeout_s=60)
        assert set(watch.workers) == {"cpu0", "cpu1"}
        events = [e for _ in range(300) for e in watch.poll()]
        assert events == []
    finally:
        client.close()


def test_the_null_engine_reports_what_a_prefix_cache_of_its_size_serves():
    """Every question of a document after its first is served the document from the cache
    (the rows of a document share a shard); a cache smaller than one document serves ~nothing."""
    rows = document_questions(16, 3, seed=6, order="shuffled")
    shares = {}
    for kv_tokens in (200_000, 32):
        config = load_config().replace(
            scheduler={"dashboard_address": None}, engine={"null_kv_cache_tokens": kv_tokens}
        )
        with Pipeline(config, engine="fake") as p:
            results = p.run(rows)
        assert [r.id for r in results] == [row["id"] for row in rows]
        assert all(0 <= r.cached_tokens < r.prompt_tokens for r in results)
        shares[kv_tokens] = sum(r.cached_tokens for r in results) / sum(r.prompt_tokens for r in results)
        if kv_tokens == 200_000:
            by_doc = {}
            for row, r in zip(rows, results):
                by_doc.setdefault(row["doc_id"], []).append((r.cached_tokens, r.prompt_tokens))
            for served in by_doc.values():  # one document's three rows, the least served first
                first, *later = sorted(served)
                # the first finds only what every prompt shares (the chat template's start, ~1/4
                # of these prompts); the two later ones find the whole document too
                assert first[0] < 0.4 * first[1] and all(c > 0.8 * n for c, n in later), served
    assert shares[200_000] > 0.6
    assert shares[32] < 0.05  # two blocks: the chat template's first 32 tokens


def test_a_stream_left_early_stops_its_tasks_on_the_workers():
    """A caller that stops iterating ``stream`` (a break, an exception) leaves no work behind:
    its tasks still on the cluster are cancelled and the workers stop answering them, rather
    than hold the engines for rows nobody will read."""
    config = load_config().replace(
        scheduler={"dashboard_address": None},
        engine={"null_latency_s": 2.0},
        intake={"max_in_flight": 4},
        jobs={"bucket_rows": 4},
    )
    rows = document_questions(50, 4, seed=3, order="shuffled")
    with Pipeline(config, engine="fake") as p:
        for _ in p.stream(rows):  # (buckets of 4 rows, 4 requests at once per shard, 2 s each)
            break
        deadline = time.monotonic() + 3.0  # (without the cancel: busy for another ~90 s)
        while any(s["metrics"]["in_flight"] or s["metrics"]["queued"] for s in p.worker_stats()):
            assert time.monotonic() < deadline, [s["metrics"] for s in p.worker_stats()]
            time.sleep(0.1)
        served = sum(s["requests"] for s in p.worker_stats())
        time.sleep(4.5)
        assert sum(s["requests"] for s in p.worker_stats()) == served < len(rows)
