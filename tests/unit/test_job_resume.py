"""A job killed midway (SIGKILL to the CLI and its workers) and run again ends with the same
output as an uninterrupted run: no row lost, none twice, in input order."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from pipeline import load_config
from pipeline.bench.workloads import document_questions

ROOT = Path(__file__).resolve().parents[2]
ROWS = 2000
DETERMINISTIC = ["doc_id", "expected", "id", "answer", "error", "prompt_tokens", "cached_tokens", "completion_tokens"]


def cli(src, out, config):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline",
            "run",
            str(src),
            str(out),
            "--engine",
            "fake",
            "--part-rows",
            "50",
            "--quiet",
            "--config",
            str(config),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # its own process group: the kill reaches the workers too


def test_killed_job_resumes_to_the_uninterrupted_output(tmp_path):
    base = load_config().replace(scheduler={"dashboard_address": None})
    config, slow = tmp_path / "cluster.yaml", tmp_path / "slow.yaml"
    config.write_text(yaml.safe_dump(base.model_dump()))
    slow.write_text(yaml.safe_dump(base.replace(engine={"null_latency_s": 1.0}).model_dump()))
    rows = [
        {**r, "question": f"{r['question']} ({i})"}
        for i, r in enumerate(document_questions(ROWS // 4, 4, seed=5, order="shuffled"))
    ]
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    killed, partial = tmp_path / "killed.parquet", tmp_path / "killed.parquet.partial"

    proc = cli(src, killed, slow)  # ~190 rows/s: the kill lands midway
    deadline = time.monotonic() + 240
    # a cluster job (the default for Parquet): each answer task commits its answers 50 rows at a time
    while len(list(partial.glob("answers/p*/*.parquet"))) < 3:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no answers committed in time"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not killed.exists()
    committed = pq.read_table(partial / "answers", columns=["position"]).column("position").to_pylist()
    assert 150 <= len(committed) < ROWS and len(set(committed)) == len(committed)

    resumed = cli(src, killed, config)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert f"resuming: {len(committed)} of {ROWS} rows are already in" in err
    assert f"rows: {ROWS - len(committed)} " in out  # only the rest answered
    reference = cli(src, tmp_path / "reference.parquet", config)
    _, err = reference.communicate(timeout=300)
    assert reference.returncode == 0, err

    got = pq.read_table(killed).select(DETERMINISTIC)
    want = pq.read_table(tmp_path / "reference.parquet").select(DETERMINISTIC)
    assert got.num_rows == ROWS and got.column("id").to_pylist() == [r["id"] for r in rows]
    assert got.equals(want)
    assert not partial.exists()


def test_a_partial_output_removed_mid_job_stops_it_and_the_advised_rerun_starts_over(tmp_path):
    """The CLI's one message (exit 1) for an OUTPUT.partial removed while the job runs, then the
    rerun it advises: it starts over and writes every row once, in input order."""
    import shutil

    base = load_config().replace(scheduler={"dashboard_address": None})
    config, slow = tmp_path / "cluster.yaml", tmp_path / "slow.yaml"
    config.write_text(yaml.safe_dump(base.model_dump()))
    slow.write_text(yaml.safe_dump(base.replace(engine={"null_latency_s": 1.0}).model_dump()))
    rows = document_questions(ROWS // 4, 4, seed=7, order="shuffled")
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    partial = tmp_path / "out.parquet.partial"

    proc = cli(src, out, slow)
    deadline = time.monotonic() + 240
    while len(list(partial.glob("answers/p*/*.parquet"))) < 2:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no answers committed in time"
        time.sleep(0.1)
    while partial.exists():  # (a write under way may add a file while it goes)
        shutil.rmtree(partial, ignore_errors=True)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert err.strip().splitlines()[-1] == (
        f"error: {partial} was removed while the job ran; the answers it held "
        f"are gone; run the same command again to start over"
    )
    assert not partial.exists()

    again = cli(src, out, config)
    stdout, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert "resuming" not in err and f"rows: {ROWS} " in stdout
    assert pq.read_table(out, columns=["id"]).column("id").to_pylist() == [r["id"] for r in rows]
