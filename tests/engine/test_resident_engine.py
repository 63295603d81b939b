"""The resident cluster with the real engine: `up`, two jobs from two separate processes (the
second, on the same documents in another order, finds warm engines and its documents cached),
`status`, a third job whose client is killed mid-way and run again, `down` (no engine process
left)."""

import json
import os
import random
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
from pipeline.bench.prefill_ideal import block_ideal
from pipeline.bench.workloads import document_questions
from pipeline.client.tokenizer import load_tokenizer
from pipeline.model import resolve_model
from tasks import DocumentQuestion

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.own_cluster


def cli(env, *args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
    )


def engine_processes(state):
    """Each shard's engine-core and model-runner processes (descendants of its worker)."""
    out = {}
    for name, (pid, _) in state["processes"].items():
        if name != "scheduler":
            out[name] = sorted(
                p.pid
                for p in psutil.Process(pid).children(recursive=True)
                if "VLLM" in " ".join(p.cmdline()) or p.name().startswith("VLLM")
            )
    return out


def ideal_cached_share(rows, config):
    tok = load_tokenizer(resolve_model(config))
    task = DocumentQuestion(tok)
    prompts = []
    for r in rows:
        parts = task.split(r)
        prompts.append(
            tok.encode(parts.prefix, add_special_tokens=False) + tok.encode(parts.suffix, add_special_tokens=False)
        )
    total = sum(map(len, prompts))
    return 1 - block_ideal(prompts, config.engine.block_size, shards=len(config.shards)) / total


def test_up_two_jobs_from_two_processes_status_down(tmp_path, run_killed_once_answered):
    env = {**os.environ, "PIPELINE_CLUSTER_DIR": str(tmp_path / "cluster")}
    # (8 requests at once per engine: a job's answers are committed a few at a time, so the client
    # killed below once 2 answer files are in is killed mid-job, not as all 32 rows of a shard end)
    config = load_config().replace(scheduler={"dashboard_address": None}, intake={"max_in_flight": 8})
    config_file = tmp_path / "cluster.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    rows = document_questions(16, 4, filler_sentences=40, seed=5, order="grouped")
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "one.parquet")
    shuffled = rows[:]
    random.Random(9).shuffle(shuffled)
    pq.write_table(pa.Table.from_pylist(shuffled), tmp_path / "two.parquet")

    up = cli(env, "up", "--config", config_file)
    assert up.returncode == 0, up.stderr + up.stdout
    assert "shard cpu0: engine ready in" in up.stderr and "shard cpu1: engine ready in" in up.stderr
    state = json.loads((tmp_path / "cluster" / "state.json").read_text())
    procs = []
    try:
        procs = [
            p
            for pid, _ in state["processes"].values()
            for p in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        ]
        engines = engine_processes(state)
        assert all(engines.values()), engines
        first = cli(env, "run", tmp_path / "one.parquet", tmp_path / "one-out.parquet", "--config", config_file)
        second = cli(env, "run", tmp_path / "two.parquet", tmp_path / "two-out.parquet", "--config", config_file)
        for job in (first, second):
            assert job.returncode == 0, job.stderr
            assert f"using the local cluster at {state['address']}" in job.stderr
        print(first.stderr, first.stdout, second.stderr, second.stdout, sep="\n")

        assert engine_processes(state) == engines  # the same engines answered both jobs
        status = json.loads(cli(env, "status", "--json", "--config", config_file).stdout)
        for shard in ("cpu0", "cpu1"):
            s = status["shards"][shard]
            assert s["phase"] == "ready" and s["engine_builds"] == 1
        assert sum(status["shards"][s]["requests"] for s in ("cpu0", "cpu1")) == 2 * len(rows)

        expected = {r["id"]: r["expected"] for r in rows}
        for name in ("one-out", "two-out"):  # the right answer on the right row, no row lost
            out = pq.read_table(tmp_path / f"{name}.parquet").to_pylist()
            assert sorted(o["id"] for o in out) == sorted(expected)
            right = sum(o["answer"] is not None and expected[o["id"]].lower() in o["answer"].lower() for o in out)
            assert right >= 0.9 * len(out)
        two = pq.read_table(tmp_path / "two-out.parquet").to_pylist()
        share = sum(o["cached_tokens"] for o in two) / sum(o["prompt_tokens"] for o in two)
        ideal = ideal_cached_share(rows, config)
        print(f"second job: cached share {share:.3f}; first job's ideal {ideal:.3f}")
        assert share >= 0.95 * ideal
        table = cli(env, "status", "--config", config_file).stdout
        assert "cpu0" in table and "ready" in table and "documents" in table
        _client_killed_mid_job_and_run_again(env, config_file, tmp_path, run_killed_once_answered)
    finally:
        down = cli(env, "down", "--config", config_file)
    assert down.returncode == 0, down.stderr
    _, alive = psutil.wait_procs(procs, timeout=15)
    assert not alive, f"left running after down: {alive}"


def _client_killed_mid_job_and_run_again(env, config_file, tmp_path, kill_run):
    """A cluster job's client (the `run` process) is killed once answers are committed; the
    cluster lives on, and the job's answer tasks stop there. The same command run again answers
    the rest: every row once, in input order, answered right."""
    rows = document_questions(16, 4, filler_sentences=40, seed=6, order="shuffled")
    src, out = tmp_path / "three.parquet", tmp_path / "three-out.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    answers = tmp_path / "three-out.parquet.partial" / "answers"
    kill_run([src, out, "--part-rows", "4", "--config", config_file], env, answers, files=2, timeout=300)
    assert not out.exists()
    time.sleep(2)  # (the killed client's answer tasks stop on the cluster: its requests are aborted)
    committed = pq.read_table(answers, columns=["position"]).num_rows
    again = cli(env, "run", src, out, "--config", config_file)
    assert again.returncode == 0, again.stderr
    print("client killed, run again:", again.stderr, again.stdout, sep="\n")
    assert committed < len(rows) and f"resuming: {committed} of {len(rows)} rows are already in" in again.stderr
    assert f"rows: {len(rows) - committed} " in again.stdout
    got = pq.read_table(out).to_pylist()
    assert [o["id"] for o in got] == [r["id"] for r in rows]
    assert all(o["error"] is None for o in got), [o["error"] for o in got if o["error"]][:3]
    right = sum(r["expected"].lower() in (o["answer"] or "").lower() for r, o in zip(rows, got))
    assert right >= 0.9 * len(rows)


def test_a_config_the_engine_rejects_is_one_clear_line(tmp_path):
    config = load_config().replace(scheduler={"dashboard_address": None}, engine={"max_model_len": 999_999})
    config_file = tmp_path / "cluster.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    pq.write_table(pa.Table.from_pylist(document_questions(2, 1)), tmp_path / "in.parquet")
    job = cli(os.environ, "run", tmp_path / "in.parquet", tmp_path / "out.parquet", "--config", config_file)
    assert job.returncode == 1
    errors = [line for line in job.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and len(job.stderr.splitlines()) <= 3, job.stderr
    assert (
        "error: shard cpu0, cpu1: the engine did not start: ValidationError: User-specified max_model_len "
        "(999999) is greater than the derived max_model_len"
    ) in errors[0]
    assert "the whole error is in the workers' logs" in errors[0]
