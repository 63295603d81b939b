"""Several machines, rehearsed on loopback: `python -m pipeline scheduler` and one `python -m
pipeline worker` per shard, each its own OS process tree (Dask's scheduler; a supervisor, its
`dask worker` nanny and the worker); the pipeline connects to the scheduler's address from
cluster.yaml. Across real network hosts: tests/unit/test_hosts_netns.py. The last test kills a
worker together with its nanny (a host lost for good): its rows go to the survivor.
"""

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections import Counter
from pathlib import Path

import psutil
import pytest
import yaml

from helpers.rig_cluster import printed_address
from pipeline import Pipeline
from pipeline.bench.workloads import document_questions
from pipeline.jobs.recovery import current_workers
from pipeline.summary import GONE, LOST, REJOINED

ROOT = Path(__file__).resolve().parents[2]
# The docs' recipe ("Several machines"): the pipeline's own commands, no Dask variable set by hand.
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
PIPELINE = [sys.executable, "-m", "pipeline"]


def _config(tmp, address):
    cfg = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    cfg["scheduler"]["address"] = address
    # workers on other hosts: the shards are listed (`auto` would lay out the client's machine)
    cfg["shards"] = [
        {"name": "cpu0", "devices": [0], "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}},
        {"name": "cpu1", "devices": [1], "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}},
    ]
    cfg["engine"].update(kind="fake", null_latency_s=0.05)
    cfg["advanced"]["intake"].update(max_in_flight=2, concurrent_batches=2)
    cfg["advanced"]["recovery"] = {"poll_interval_s": 0.2, "rejoin_timeout_s": 5.0}
    # (a stream's answers come bucket by bucket: kills land mid-job)
    cfg["advanced"].setdefault("jobs", {})["bucket_rows"] = 16
    path = tmp / "cluster.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def processes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("multinode")
    config_path = _config(tmp, "tcp://127.0.0.1:0")
    procs = {
        "scheduler": subprocess.Popen(
            [
                *PIPELINE,
                "scheduler",
                "--port",
                "0",
                "--dashboard-address",
                "127.0.0.1:0",
                "--config",
                str(config_path),
                "--log-file",
                str(tmp / "scheduler.log"),
            ],
            env=ENV,
            cwd=tmp,
            stderr=subprocess.PIPE,
            text=True,
        )
    }
    try:
        address, port = printed_address(procs["scheduler"])
        info = {"address": address, "services": {"dashboard": port}}
        config_path = _config(tmp, address)
        for shard in ("cpu0", "cpu1"):
            procs[shard] = subprocess.Popen(
                [
                    *PIPELINE,
                    "worker",
                    address,
                    "--shard",
                    shard,
                    "--config",
                    str(config_path),
                    "--log-file",
                    str(tmp / f"{shard}.log"),
                ],
                env=ENV,
                cwd=tmp,
            )
        yield procs, config_path, info
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def _worker_process(pipeline, shard):
    workers = current_workers(pipeline.client)
    addr = next(a for a, w in workers.items() if f"shard-{shard}" in (w.get("resources") or {}))
    return psutil.Process(pipeline.client.run(os.getpid, workers=[addr])[addr])


@pytest.fixture(scope="module")
def pipeline(processes):
    _, config_path, _ = processes
    with Pipeline(str(config_path)) as p:
        yield p


def test_workers_started_by_dask_worker_serve_their_shards(processes, pipeline):
    procs, _, info = processes
    rows = document_questions(10, 3, seed=21, order="shuffled")
    results = pipeline.run(rows)
    assert [r.id for r in results] == [row["id"] for row in rows] and all(r.error is None for r in results)
    assert {r.shard for r in results} == {"cpu0", "cpu1"}
    # each shard is served by a separate `dask worker` process tree, not by this process
    pids = pipeline.client.run(os.getpid)
    for shard in ("cpu0", "cpu1"):
        assert {c.pid for c in psutil.Process(procs[shard].pid).children(recursive=True)} & set(pids.values())
    assert os.getpid() not in pids.values()
    # the preload gives each worker its shard's resource and the cluster jobs' slots
    # (2 threads: 1 answer task at a time; jobs.reads_per_worker reads)
    resources = {w["name"]: w["resources"] for w in pipeline.client.scheduler_info(n_workers=-1)["workers"].values()}
    assert resources == {s: {f"shard-{s}": 1_000_000, "answer-slots": 1, "read-slots": 1} for s in ("cpu0", "cpu1")}
    # the scheduler started with `--preload pipeline.scheduler.preload` serves the pipeline's pages
    port = info["services"]["dashboard"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/pipeline/table", timeout=10) as r:
        page = r.read().decode()
    assert "cpu0" in page and "cpu1" in page
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/pipeline", timeout=10) as r:
        assert "Bokeh.embed.embed_items" in r.read().decode()  # the plots (its dashboard is on)


def test_engines_of_dask_worker_processes_start_without_dasks_worker_variables(processes, pipeline):
    from pipeline import engine_env

    def child_env_as_engine_gets_it(keep):  # runs in the worker (a local function travels by value)
        import os
        import subprocess
        import sys

        from pipeline import engine_env

        code = "import json, os; print(json.dumps(dict(os.environ)))"
        with engine_env.engine_environment(keep):  # what the engine plugin builds its engine in
            child = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)
        return child, dict(os.environ)

    dask_only = engine_env.added_by_dask(os.environ)
    assert "MALLOC_TRIM_THRESHOLD_" in dask_only
    for shard in pipeline.config.shards:
        addr = next(
            a
            for a, w in current_workers(pipeline.client).items()
            if f"shard-{shard.name}" in (w.get("resources") or {})
        )
        child, worker = pipeline.client.run(child_env_as_engine_gets_it, shard.worker_env(), workers=[addr])[addr]
        assert worker["MALLOC_TRIM_THRESHOLD_"] == "65536"  # the `dask worker` nanny gave it to its worker
        assert engine_env.ADDED_RECORD in worker  # `pipeline worker` records which are Dask's
        assert not [k for k in dask_only if k in child], sorted(k for k in dask_only if k in child)
        assert all(child.get(k) == v for k, v in shard.worker_env().items())


def test_dask_worker_killed_comes_back_through_its_nanny_with_its_shard(processes, pipeline):
    procs, _, _ = processes
    rows = document_questions(60, 4, seed=23, order="shuffled")
    worker = _worker_process(pipeline, "cpu1")
    # a child of its `dask worker` (nanny) process, which `pipeline worker` started
    assert psutil.Process(worker.ppid()).ppid() == procs["cpu1"].pid
    out = []
    for r in pipeline.stream(rows):
        out.append(r)
        if len(out) == 100:
            worker.send_signal(signal.SIGKILL)
    report = pipeline.last_report
    print("dask worker restarted:", report.summary())
    counts = Counter(r.id for r in out)
    assert len(out) == len(rows) and max(counts.values()) == 1 and all(r.error is None for r in out)
    kinds = [(e.kind, e.shard) for e in report.events]
    assert (LOST, "cpu1") in kinds and (REJOINED, "cpu1") in kinds
    # the restarted process took its shard again from the preload
    assert any(r.shard == "cpu1" for r in pipeline.run(document_questions(10, 2, seed=24)))


def test_host_lost_for_good_its_rows_go_to_the_survivor(processes, pipeline):
    procs, _, _ = processes
    rows = document_questions(100, 4, seed=22, order="shuffled")
    supervisor = psutil.Process(procs["cpu1"].pid)
    nanny = psutil.Process(_worker_process(pipeline, "cpu1").ppid())
    worker = _worker_process(pipeline, "cpu1")
    out = []
    for r in pipeline.stream(rows):
        out.append(r)
        if len(out) == 100:  # the supervisor and the nanny first, so nothing restarts the worker
            supervisor.send_signal(signal.SIGKILL)
            nanny.send_signal(signal.SIGKILL)
            worker.send_signal(signal.SIGKILL)
    report = pipeline.last_report
    print("host lost:", report.summary())
    counts = Counter(r.id for r in out)
    assert len(out) == len(rows) == 400 and set(counts) == {row["id"] for row in rows} and max(counts.values()) == 1
    assert all(r.error is None for r in out)
    kinds = [(e.kind, e.shard) for e in report.events]
    assert (LOST, "cpu1") in kinds and (GONE, "cpu1") in kinds
    assert report.buckets_moved > 0
    assert {r.shard for r in out[-100:]} == {"cpu0"}
