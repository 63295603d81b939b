"""Killing a worker process mid-job (SIGKILL, a real kill) loses no row and answers none twice.

The null engine answers after a short sleep so that the job is still running when the kill
lands; the recovery path (Dask's retry, the client's shard watch, re-routing) is the same
as with vLLM.
"""
import os
import signal
import time
from collections import Counter

import pytest

from pipeline import Pipeline, load_config
from pipeline.recovery import GONE, LOST, REJOINED
from pipeline.workloads import document_questions

ROWS = 400


def _config(rejoin_timeout_s):
    return load_config().replace(
        scheduler={"dashboard_address": None},
        engine={"kind": "null", "null_latency_s": 0.05},
        intake={"batch_size": 8, "queue_per_shard": 32, "max_in_flight": 2, "concurrent_batches": 2},
        recovery={"poll_interval_s": 0.2, "rejoin_timeout_s": rejoin_timeout_s})


def _pids(p, shard):
    """(worker pid, nanny pid) of the worker serving ``shard``."""
    workers = p.client.scheduler_info(n_workers=-1)["workers"]
    addr = next(a for a, w in workers.items() if f"shard-{shard}" in (w.get("resources") or {}))
    worker_pid = p.client.run(os.getpid, workers=[addr])[addr]
    nanny_pid = next(iter(p.client.run(os.getpid, workers=[addr], nanny=True).values()))
    return worker_pid, nanny_pid


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


def test_killed_worker_is_restarted_by_its_nanny_and_its_batches_run_again():
    rows = document_questions(100, 4, seed=5, order="shuffled")
    assert len(rows) == ROWS
    with Pipeline(_config(rejoin_timeout_s=120)) as p:
        worker_pid, _ = _pids(p, "cpu1")
        t_kill = []

        def kill():
            t_kill.append(time.monotonic())
            os.kill(worker_pid, signal.SIGKILL)

        results = _run_killing(p, rows, 60, kill)
        report = p.last_report
        print("nanny restart:", report.summary())
        _assert_every_row_once(rows, results)
        kinds = [(e.kind, e.shard) for e in report.events]
        assert (LOST, "cpu1") in kinds and (REJOINED, "cpu1") in kinds and (GONE, "cpu1") not in kinds
        assert report.workers_lost == 1 and report.batches_retried >= 1
        assert report.rows == ROWS and report.duplicates_dropped == 0
        # the restarted worker is a new process, and it answered rows after the kill
        assert _pids(p, "cpu1")[0] != worker_pid
        assert Counter(r.shard for r in results[60:])["cpu1"] > 0
        # the next job runs on both shards as usual
        again = p.run(document_questions(10, 2, seed=6))
        assert {r.shard for r in again} == {"cpu0", "cpu1"} and all(r.error is None for r in again)


def test_worker_that_does_not_come_back_has_its_rows_rerouted_to_the_survivors():
    rows = document_questions(100, 4, seed=7, order="shuffled")
    with Pipeline(_config(rejoin_timeout_s=1.0)) as p:
        worker_pid, nanny_pid = _pids(p, "cpu1")

        def kill():  # the nanny first, so nothing restarts the worker
            os.kill(nanny_pid, signal.SIGKILL)
            os.kill(worker_pid, signal.SIGKILL)

        results = _run_killing(p, rows, 60, kill)
        report = p.last_report
        print("no restart:", report.summary())
        _assert_every_row_once(rows, results)
        kinds = [(e.kind, e.shard) for e in report.events]
        assert (LOST, "cpu1") in kinds and (GONE, "cpu1") in kinds
        assert report.rows_rerouted > 0 and report.rows_failed == 0
        assert "cpu1" in p.router.down
        # after the re-routing only the survivor answers
        tail = results[-(ROWS // 4):]
        assert {r.shard for r in tail} == {"cpu0"}
