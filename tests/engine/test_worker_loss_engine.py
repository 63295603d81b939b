"""A worker killed mid-job on the real engine: every row answered once, on its own row, and the
killed worker's vLLM engine-core process does not outlive it. Then, on the same cluster, an
engine-core process killed mid-way through a file job: its worker
restarts with a fresh engine and the bucket is answered again there, every row once. Then
closing the pipeline stops every engine cleanly, before Dask's nanny would have to kill a worker.

Starts its own 2-shard cluster with enforce_eager (about 25 s per engine instead of
minutes of compilation) and small batches, so the kill lands while rows are in flight;
runs before the session cluster starts (see conftest.py), so engines never overlap.
"""

import logging
import os
import signal
import threading
import time
from collections import Counter

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import Pipeline, engine_env, load_config, prepare_job
from pipeline.bench.workloads import document_questions
from pipeline.jobs.recovery import current_workers
from pipeline.summary import LOST, REJOINED

pytestmark = pytest.mark.own_cluster


def test_real_worker_and_engine_kills_answer_every_row_once_and_reap_the_engine(tmp_path):
    config = load_config().replace(
        scheduler={"dashboard_address": None},
        engine={"enforce_eager": True, "max_num_seqs": 16},
        intake={"max_in_flight": 8},
        jobs={"bucket_rows": 4},
    )  # (answers come back bucket by bucket: the kill
    # lands mid-job)
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
        _engine_killed_mid_cluster_job(p, tmp_path)
    finally:
        engine_processes = {
            addr: [c.pid for c in psutil.Process(pid).children(recursive=True)]
            for addr, pid in p.client.run(os.getpid).items()
        }
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


def _engine_killed_mid_cluster_job(p, tmp_path):
    """Shard cpu0's engine core is killed (SIGKILL) once the cluster job has committed answers:
    the worker reports its engine dead and restarts, and Dask reruns the bucket on it, skipping
    what was committed. Every row once, in input order, answered right."""
    rows = document_questions(16, 4, seed=32, order="shuffled")
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    config = p.config.replace(jobs={"partition_rows": 16})
    job = prepare_job(src, tmp_path / "out.parquet", config=config, notify=lambda m: None, part_rows=4)
    addr = next(a for a, w in current_workers(p.client).items() if "shard-cpu0" in (w.get("resources") or {}))
    worker_pid = p.client.run(os.getpid, workers=[addr])[addr]
    (core,) = [pid for pid, name in engine_env.engine_processes(worker_pid).items() if "EngineCore" in name]
    killed = threading.Event()

    def kill_once_answers_are_committed():
        while not killed.is_set():
            if job.done >= 4:
                os.kill(core, signal.SIGKILL)
                killed.set()
            time.sleep(0.1)

    killer = threading.Thread(target=kill_once_answers_are_committed, daemon=True)
    killer.start()
    try:
        summary = job.run(p, progress=False)
    finally:
        stopped_early = not killed.is_set()
        killed.set()
        killer.join()
    assert not stopped_early, "the job ended before the engine core was killed"
    print("real engine, engine core killed in a cluster job:", summary.render())
    died = p.client.get_events("pipeline-engine-died")
    assert any(e["shard"] == "cpu0" for _, e in died), died
    addr = next(a for a, w in current_workers(p.client).items() if "shard-cpu0" in (w.get("resources") or {}))
    assert p.client.run(os.getpid, workers=[addr])[addr] != worker_pid  # restarted, with a fresh engine
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [o["id"] for o in out] == [r["id"] for r in rows] and summary.rows == len(rows)
    assert all(o["error"] is None for o in out), [o["error"] for o in out if o["error"]][:3]
    right = sum(r["expected"].lower() in (o["answer"] or "").lower() for r, o in zip(rows, out))
    assert right >= 0.85 * len(rows)


class _Messages(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())
