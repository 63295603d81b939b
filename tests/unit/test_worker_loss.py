"""Killing a worker process mid-job (SIGKILL, a real kill) loses no row and answers none twice.

Here the nanny restarts the worker (the embedded cluster's nannies live in this process);
tests/unit/test_multinode.py kills a `dask worker` together with its nanny, so that the
shard's rows must move to the survivor.

The fake engine answers after a short sleep so that the job is still running when the kill
lands (the stream's buckets of 16 rows end one by one); the recovery path
(Dask's retry, the client's shard watch, buckets moved) is the same as with vLLM.
"""

import os
import signal
import sys
import time
from collections import Counter

import cloudpickle

from helpers.dead_engine import kill_engine
from pipeline import Pipeline, load_config
from pipeline.bench.workloads import document_questions
from pipeline.jobs.recovery import current_workers
from pipeline.summary import GONE, LOST, REJOINED

ROWS = 400


def _config(rejoin_timeout_s):
    return load_config().replace(
        scheduler={"dashboard_address": None},
        engine={"kind": "fake", "null_latency_s": 0.05},
        intake={"max_in_flight": 2, "concurrent_batches": 2},
        jobs={"bucket_rows": 16},
        recovery={"poll_interval_s": 0.2, "rejoin_timeout_s": rejoin_timeout_s},
    )


def _worker_pid(p, shard):
    workers = current_workers(p.client)
    addr = next(a for a, w in workers.items() if f"shard-{shard}" in (w.get("resources") or {}))
    return p.client.run(os.getpid, workers=[addr])[addr]


def _run_killing(p, rows, kill_after, kill):
    out = []
    for r in p.stream(rows):
        out.append(r)
        if len(out) == kill_after:
            kill()
    return out


def _assert_every_row_once(rows, results):
    counts = Counter(r.id for r in results)
    assert len(results) == len(rows)
    assert set(counts) == {row["id"] for row in rows}
    assert max(counts.values()) == 1
    assert all(r.error is None for r in results), [r.error for r in results if r.error][:3]


def test_killed_worker_is_restarted_by_its_nanny_and_its_tasks_run_again():
    rows = document_questions(100, 4, seed=5, order="shuffled")
    assert len(rows) == ROWS
    with Pipeline(_config(rejoin_timeout_s=120)) as p:
        worker_pid = _worker_pid(p, "cpu1")

        def kill():
            os.kill(worker_pid, signal.SIGKILL)

        results = _run_killing(p, rows, 100, kill)
        report = p.last_report
        print("nanny restart:", report.summary())
        _assert_every_row_once(rows, results)
        kinds = [(e.kind, e.shard) for e in report.events]
        assert (LOST, "cpu1") in kinds and (REJOINED, "cpu1") in kinds and (GONE, "cpu1") not in kinds
        assert report.workers_lost == 1 and report.rows == ROWS
        # the restarted worker is a new process, and it answered rows after the kill
        assert _worker_pid(p, "cpu1") != worker_pid
        assert Counter(r.shard for r in results[100:])["cpu1"] > 0
        # the next job runs on both shards as usual
        again = p.run(document_questions(10, 2, seed=6))
        assert {r.shard for r in again} == {"cpu0", "cpu1"} and all(r.error is None for r in again)


def test_engine_that_dies_in_a_live_worker_is_reported_and_the_worker_restarted():
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    rows = document_questions(40, 3, seed=9, order="shuffled")
    with Pipeline(_config(rejoin_timeout_s=120)) as p:
        before = _worker_pid(p, "cpu1")
        workers = current_workers(p.client)
        addr = next(a for a, w in workers.items() if "shard-cpu1" in (w.get("resources") or {}))
        p.client.run(kill_engine, workers=[addr])
        results = p.run(rows)
        report = p.last_report
        print("engine died:", report.summary())
        _assert_every_row_once(rows, results)
        died = p.client.get_events("pipeline-engine-died")
        assert died and died[0][1]["shard"] == "cpu1" and "engine core died" in died[0][1]["error"]
        deadline = time.monotonic() + 60  # the worker restarts with a fresh engine
        while _worker_pid(p, "cpu1") == before:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        again = p.run(document_questions(10, 2, seed=10))
        assert {r.shard for r in again} == {"cpu0", "cpu1"} and all(r.error is None for r in again)
