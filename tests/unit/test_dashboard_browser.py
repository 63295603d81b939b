"""The plots page (/pipeline) in a real browser: a cluster on the fake engine runs a job of
tens of seconds while headless Chromium loads the page, reads its Bokeh document and
reloads it. Skipped, saying what to install, where Chromium, its driver or selenium is
missing (docs/operating.md, "The dashboard")."""

import sys
import threading
import time
from pathlib import Path

import pytest

from pipeline import Pipeline, load_config
from pipeline.bench.workloads import document_questions

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import chromium  # noqa: E402

SHARDS = ("cpu0", "cpu1")
FIGURES = [
    "pipeline-cache-hits",
    "pipeline-engine-busy",
    "pipeline-load",
    "pipeline-output-tokens",
    "pipeline-progress",
    "pipeline-requests",
]
# 2 shards x 2 requests in flight x 0.1 s each: at most 40 rows/s, so 960 rows take 24 s or more
ROWS = document_questions(240, 4, seed=11, order="shuffled")


@pytest.fixture(scope="module")
def browser():
    try:
        chrome = chromium.start()
    except chromium.NoBrowser as exc:
        pytest.skip(str(exc))
    yield chrome
    chrome.quit()


@pytest.fixture(scope="module")
def slow_pipeline():
    config = load_config().replace(
        scheduler={"dashboard_address": "127.0.0.1:0"}, engine={"null_latency_s": 0.1}, intake={"max_in_flight": 2}
    )
    with Pipeline(config, engine="fake") as p:
        yield p


def _wait_for(read, ok, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        state = read()
        if state is not None and ok(state):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout_s:.0f} s; the page shows: {state}")
        time.sleep(0.25)


def test_the_plots_render_advance_during_a_job_and_keep_their_history_over_a_reload(browser, slow_pipeline):
    p = slow_pipeline
    url = p.dashboard_link.rsplit("/", 1)[0] + "/pipeline"
    assert url.startswith("http://127.0.0.1:")
    answered = []
    job = threading.Thread(target=lambda: answered.extend(p.stream(ROWS)), daemon=True)
    job.start()

    def read():
        return chromium.plots_state(browser)

    def shows_job(s):
        return s["job"] and s["job"]["n"] and s["job"]["rows_done_last"] > 0 and set(s["shards"]) == set(SHARDS)

    browser.get(url)
    first = _wait_for(read, shows_job, 30, "the page did not show the job and both shards")
    assert first["figures"] == FIGURES
    assert first["canvases"] >= len(FIGURES), first  # Bokeh drew every figure
    assert first["job"]["rows_total_last"] == len(ROWS)

    # the plots advance while the job runs: new points, later times, more rows answered
    def advanced(s):
        return (
            s["job"]["last"] > first["job"]["last"] + 1500
            and s["job"]["rows_done_last"] > first["job"]["rows_done_last"]
            and all(s["shards"][n]["n"] > first["shards"][n]["n"] for n in SHARDS)
        )

    later = _wait_for(read, advanced, 15, "the plots did not advance")
    for n in SHARDS:
        assert later["shards"][n]["requests_per_s_max"] > 0 and later["shards"][n]["in_flight_max"] > 0, later
    assert job.is_alive(), "the job ended before the reload: make it longer"

    # a reload mid-job starts with the history kept on the scheduler, not from nothing
    reload_ms = time.time() * 1000
    browser.refresh()
    again = _wait_for(
        read,
        lambda s: shows_job(s) and s["job"]["n"] >= later["job"]["n"],
        30,
        "the reloaded page did not show the job's history",
    )
    assert job.is_alive(), "the job ended during the reload: make it longer"
    assert again["job"]["first"] <= first["job"]["first"] < reload_ms - 1500
    for n in SHARDS:
        assert again["shards"][n]["first"] <= first["shards"][n]["first"]
        assert again["shards"][n]["n"] >= later["shards"][n]["n"]
    assert again["canvases"] >= len(FIGURES)

    job.join(120)
    assert not job.is_alive() and len(answered) == len(ROWS)
    # the progress plot ends at the input's rows, all answered, none with an error
    done = _wait_for(
        read, lambda s: s["job"]["rows_done_last"] == len(ROWS), 10, "the progress plot did not reach the job's end"
    )
    assert done["job"]["rows_total_last"] == len(ROWS) and done["job"]["rows_with_error_last"] == 0
