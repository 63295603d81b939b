"""`python -m pipeline up / run / status / down` with the fake engine: real Dask processes in
the background, two jobs from two processes on one cluster, a config mismatch, a job whose
client is killed, a dead cluster, and nothing left running after `down`."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline import load_config
from pipeline.bench.workloads import document_questions

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "PIPELINE_CLUSTER_DIR": str(tmp_path / "cluster")}


def cli(env, *args, timeout=180, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def write_config(path, **engine):
    cfg = load_config().replace(
        scheduler={"dashboard_address": None}, engine={"kind": "fake", "null_latency_s": 0.01, **engine}
    )
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    return path


def test_up_then_jobs_from_two_processes_then_down(tmp_path, env):
    config = write_config(tmp_path / "cluster.yaml")
    rows = pa.table(
        {
            "id": [f"r{i}" for i in range(40)],
            "document": [f"Document {i % 8}. " * 20 for i in range(40)],
            "question": [f"Question {i}?" for i in range(40)],
        }
    )
    pq.write_table(rows, tmp_path / "in.parquet")
    pq.write_table(rows.take(list(range(39, -1, -1))), tmp_path / "reversed.parquet")

    up = cli(env, "up", "--config", config)
    assert up.returncode == 0, up.stderr
    assert "cluster up in" in up.stdout and "python -m pipeline down" in up.stdout
    try:
        state = json.loads((tmp_path / "cluster" / "state.json").read_text())
        assert set(state["processes"]) == {"scheduler", "cpu0", "cpu1"}
        assert all(psutil.pid_exists(pid) for pid, _ in state["processes"].values())
        assert cli(env, "up", "--config", config).stdout.startswith("the local cluster is already up at")

        before = json.loads(cli(env, "status", "--json", "--config", config).stdout)
        first = cli(env, "run", tmp_path / "in.parquet", tmp_path / "out1.parquet", "--config", config)
        # paths relative to the client's folder, which is not the workers' (README: `run
        # datasets/sample.parquet out/a.parquet` on a cluster from `up`)
        second = cli(env, "run", "reversed.parquet", "out2.parquet", "--config", config, cwd=tmp_path)
        for job in (first, second):
            assert job.returncode == 0, job.stderr
            assert f"using the local cluster at {state['address']}" in job.stderr
            assert "cluster up in" not in job.stderr  # nothing was started
        assert "0 requests served, 0 documents cached" in first.stderr
        assert "40 requests served, 8 documents cached" in second.stderr
        for name in ("out1", "out2"):
            out = pq.read_table(tmp_path / f"{name}.parquet")
            assert sorted(out.column("id").to_pylist()) == sorted(rows.column("id").to_pylist())
            assert out.column("error").null_count == 40
        after = json.loads(cli(env, "status", "--json", "--config", config).stdout)
        for shard in ("cpu0", "cpu1"):  # the same workers served both jobs, each engine built once
            assert after["shards"][shard]["pid"] == before["shards"][shard]["pid"]
            assert after["shards"][shard]["engine_builds"] == 1 and after["shards"][shard]["phase"] == "ready"
        assert sum(after["shards"][s]["requests"] for s in ("cpu0", "cpu1")) == 80
        # the second job's documents went where the first job had put them
        one = dict(zip(*pq.read_table(tmp_path / "out1.parquet", columns=["id", "shard"]).to_pydict().values()))
        two = dict(zip(*pq.read_table(tmp_path / "out2.parquet", columns=["id", "shard"]).to_pydict().values()))
        assert one == two
        table = cli(env, "status", "--config", config).stdout
        assert f"local cluster at {state['address']}" in table and "cpu0" in table and "ready" in table

        other = write_config(tmp_path / "other.yaml", null_latency_s=0.5)
        mismatch = cli(env, "run", tmp_path / "in.parquet", tmp_path / "out3.parquet", "--config", other)
        assert mismatch.returncode == 2
        assert "engine.null_latency_s: running 0.01, this config 0.5" in mismatch.stderr
        assert not (tmp_path / "out3.parquet").exists()
        procs = [psutil.Process(pid) for pid, _ in state["processes"].values()]
        procs += [c for p in procs for c in p.children(recursive=True)]
        listening = [c.laddr for p in procs for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        assert len(listening) >= 2 + 2 * 2 and {a.ip for a in listening} == {"127.0.0.1"}, listening
    finally:
        down = cli(env, "down", "--config", config)
    assert down.returncode == 0 and "the local cluster is stopped" in down.stdout
    gone, alive = psutil.wait_procs(procs, timeout=10)
    assert not alive, f"left running: {alive}"
    assert not (tmp_path / "cluster" / "state.json").exists()
    assert "no local cluster is running" in cli(env, "status", "--config", config).stdout


def test_a_job_whose_client_is_killed_stops_on_the_cluster_and_runs_again_from_its_answers(
    tmp_path, env, run_killed_once_answered
):
    config = write_config(tmp_path / "cluster.yaml", null_latency_s=0.5)
    rows = [
        {**r, "question": f"{r['question']} ({i})"}
        for i, r in enumerate(document_questions(100, 4, seed=5, order="shuffled"))
    ]
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    answers = tmp_path / "out.parquet.partial" / "answers"
    up = cli(env, "up", "--config", config)
    assert up.returncode == 0, up.stderr
    try:
        run_killed_once_answered(
            [src, out, "--part-rows", "10", "--quiet", "--config", config], env, answers, files=3, timeout=60
        )
        # Dask releases a gone client's tasks: the answer tasks stop (requests in flight aborted),
        # they do not answer the rest of the job for nobody (about 10 s more here)
        deadline = time.monotonic() + 5
        while True:
            shards = json.loads(cli(env, "status", "--json", "--config", config).stdout)["shards"]
            if all(s["metrics"]["in_flight"] == 0 and s["metrics"]["queued"] == 0 for s in shards.values()):
                break
            assert time.monotonic() < deadline, f"the killed client's job still runs on the cluster: {shards}"
            time.sleep(0.2)
        committed = pq.read_table(answers, columns=["position"]).num_rows
        time.sleep(1)
        assert pq.read_table(answers, columns=["position"]).num_rows == committed < len(rows)

        again = cli(env, "run", src, out, "--config", config)
        assert again.returncode == 0, again.stderr
        assert f"resuming: {committed} of {len(rows)} rows are already in" in again.stderr
        assert f"rows: {len(rows) - committed} " in again.stdout
        got = pq.read_table(out, columns=["id", "error"])
        assert got.column("id").to_pylist() == [r["id"] for r in rows] and got.column("error").null_count == len(rows)
    finally:
        down = cli(env, "down", "--config", config)
    assert down.returncode == 0, down.stderr


def test_a_cluster_that_died_is_said_so_and_run_starts_an_embedded_one(tmp_path, env):
    config = write_config(tmp_path / "cluster.yaml")
    pq.write_table(pa.table({"document": ["A doc."] * 4, "question": ["Q?"] * 4}), tmp_path / "in.parquet")
    assert cli(env, "up", "--config", config).returncode == 0
    state = json.loads((tmp_path / "cluster" / "state.json").read_text())
    procs = [psutil.Process(pid) for pid, _ in state["processes"].values()]
    procs += [c for p in procs for c in p.children(recursive=True)]
    for p in procs:
        p.kill()
    psutil.wait_procs(procs, timeout=10)
    job = cli(env, "run", tmp_path / "in.parquet", tmp_path / "out.parquet", "--config", config)
    assert job.returncode == 0, job.stderr
    assert "is no longer running (its scheduler process is gone); starting an embedded one" in job.stderr
    assert "worker logs:" in job.stderr
    assert pq.read_table(tmp_path / "out.parquet").num_rows == 4
    assert not (tmp_path / "cluster" / "state.json").exists()


def test_down_stops_a_cluster_whose_scheduler_does_not_answer(tmp_path, env):
    config = write_config(tmp_path / "cluster.yaml")
    assert cli(env, "up", "--config", config).returncode == 0
    state = json.loads((tmp_path / "cluster" / "state.json").read_text())
    scheduler = psutil.Process(state["processes"]["scheduler"][0])
    procs = [psutil.Process(pid) for pid, _ in state["processes"].values()]
    procs += [c for p in procs for c in p.children(recursive=True)]
    scheduler.suspend()  # alive, but it answers nobody
    try:
        down = cli(env, "down", "--config", config, timeout=120)
    finally:
        if scheduler.is_running():
            scheduler.resume()
    assert down.returncode == 0 and "the local cluster is stopped" in down.stdout
    _, alive = psutil.wait_procs(procs, timeout=10)
    assert not alive, f"left running: {alive}"
