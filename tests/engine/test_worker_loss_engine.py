"""A worker killed mid-job on the real engine: every row answered once, on its own row, and the
killed worker's vLLM engine-core process does not outlive it. Then closing the pipeline stops
every engine cleanly, before Dask's nanny would have to kill a worker.

Starts its own 2-shard cluster with enforce_eager (about 25 s per engine instead of
minutes of compilation) and small batches, so the kill lands while rows are in flight;
runs before the session cluster starts (see conftest.py), so engines never overlap.
"""
import logging
import os
import signal
import time
from collections import Counter

import psutil
import pytest

from pipeline import Pipeline, engine_env, load_config
from pipeline.client.recovery import current_workers
from pipeline.summary import LOST, REJOINED
from pipeline.bench.workloads import document_questions

pytestmark = pytest.mark.own_cluster


def test_real_worker_kill_answers_every_row_once_and_reaps_its_engine():
    config = load_config().replace(scheduler={"dashboard_address": None},
                                   engine={"enforce_eager": True, "max_num_seqs": 16},
                                   intake={"batch_size": 4, "queue_per_shard": 16, "max_in_flight": 8})
    rows = document_questions(12, 4, seed=31, order="shuffled")
    p = Pipeline(config).start()
    try:
        workers = current_workers(p.client)
        addr = next(a for a, w in workers.items() if "shard-cpu1" in (w.get("resources") or {}))
        worker_pid = p.client.run(os.getpid, workers=[addr])[addr]
        cores = [c for c in psutil.Process(worker_pid).children() if c.pid != worker_pid]
        assert cores, "the engine runs its core in a child process"
        out = []
        for r in p.stream(rows):
            out.append(r)
            if len(out) == 8:
                os.kill(worker_pid, signal.SIGKILL)
        report = p.last_report
        print("real engine, worker killed:", report.summary())
        counts = Counter(r.id for r in out)
        assert len(out) == len(rows) and set(counts) == {row["id"] for row in rows} and max(counts.values()) == 1
        assert all(r.error is None for r in out), [r.error for r in out if r.error]
        by_id = {r.id: r for r in out}
        right = sum(row["expected"].lower() in (by_id[row["id"]].answer or "").lower() for row in rows)
        assert right >= 0.85 * len(rows)
        kinds = [(e.kind, e.shard) for e in report.events]
        assert (LOST, "cpu1") in kinds and (REJOINED, "cpu1") in kinds
        # The worker its nanny restarted started its engine without Dask's worker variables too.
        new_pid = next(s["pid"] for s in p.worker_stats() if s["shard"] == "cpu1")
        assert new_pid != worker_pid
        restarted = engine_env.engine_processes(new_pid)
        assert restarted
        for pid, name in restarted.items():
            assert "MALLOC_TRIM_THRESHOLD_" not in engine_env.read_environ(pid), (name, pid)
        assert engine_env.read_environ(new_pid).get("MALLOC_TRIM_THRESHOLD_") == "65536"  # the worker keeps it
        # the killed worker's engine core was stopped by the reaper
        deadline = time.monotonic() + 30
        while any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in cores):
            assert time.monotonic() < deadline, "the killed worker's engine core is still running"
            time.sleep(0.5)
    finally:
        engine_processes = {addr: [c.pid for c in psutil.Process(pid).children(recursive=True)]
                            for addr, pid in p.client.run(os.getpid).items()}
        nanny_log = _Messages()
        logging.getLogger("distributed.nanny").addHandler(nanny_log)
        try:
            p.close()
        finally:
            logging.getLogger("distributed.nanny").removeHandler(nanny_log)
    assert not [m for m in nanny_log.messages if "still alive" in m], nanny_log.messages
    deadline = time.monotonic() + 15
    for pid in (pid for pids in engine_processes.values() for pid in pids):
        while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, f"process {pid} of a closed worker is still running"
            time.sleep(0.5)


class _Messages(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())
