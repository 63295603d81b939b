"""Jobs on an object store: a real S3-compatible server (moto's server mode) on 127.0.0.1,
reached through s3fs. s3:// to s3://, resume after a kill, and clear errors for a missing bucket
and bad credentials."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline import JobError, Pipeline, load_config, prepare_job, run_job
from pipeline.bench.workloads import document_questions

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "jobs"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3():
    """The server's storage options; the bucket ``jobs`` exists."""
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    options = {"endpoint_url": f"http://127.0.0.1:{port}", "key": "testing", "secret": "testing"}
    import s3fs

    s3fs.S3FileSystem(**options).mkdir(BUCKET)
    yield options
    server.stop()


def _fs(options):
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True, **options)


@pytest.fixture(scope="module")
def store_pipeline(s3):
    config = load_config().replace(scheduler={"dashboard_address": None}, storage_options=s3)
    with Pipeline(config, engine="fake") as p:
        yield p


def _rows(n_docs, seed):
    return [
        {**r, "document": r["document"][:300], "question": f"{r['question']} ({i})"}
        for i, r in enumerate(document_questions(n_docs, 4, seed=seed, order="shuffled"))
    ]


def _put_two_files(fs, folder, rows, cut):
    """``rows`` as two Parquet objects in ``BUCKET/folder``, the first with ``rows[:cut]``."""
    for i, part in enumerate((rows[:cut], rows[cut:])):
        with fs.open(f"{BUCKET}/{folder}/part-{i}.parquet", "wb") as f:
            pq.write_table(pa.Table.from_pylist(part), f)


def test_job_from_s3_to_s3_runs_on_the_cluster(store_pipeline, s3):
    """The workers read the input objects and write the answer and part objects; OUTPUT appears
    whole; a partial output of another job is refused once it holds answers."""
    from pipeline.data.answer_files import ANSWER_SCHEMA, AnswerFiles
    from pipeline.jobs.cluster_job import ClusterJob

    rows = _rows(30, seed=1)
    fs = _fs(s3)
    _put_two_files(fs, "in", rows, 50)
    dest = f"s3://{BUCKET}/out/answers.parquet"
    job = prepare_job(f"s3://{BUCKET}/in/", dest, config=store_pipeline.config, part_rows=25, notify=lambda m: None)
    assert isinstance(job, ClusterJob)
    summary = job.run(store_pipeline, progress=False)
    assert summary.rows == len(rows) and summary.errors == 0 and len(summary.per_shard) == 2
    fs.invalidate_cache()
    out = pq.read_table(f"{BUCKET}/out/answers.parquet", filesystem=fs).to_pylist()
    assert [o["id"] for o in out] == [r["id"] for r in rows] and all(o["error"] is None for o in out)
    assert not fs.exists(f"{BUCKET}/out/answers.parquet.partial")

    first = prepare_job(f"s3://{BUCKET}/in/", dest, config=store_pipeline.config, notify=lambda m: None)
    kept = pa.Table.from_arrays(
        [pa.array([0], f.type) if f.name == "position" else pa.nulls(1, f.type) for f in ANSWER_SCHEMA],
        schema=ANSWER_SCHEMA,
    )
    AnswerFiles(first.sink.folder).write(0, "old-b000000-00000", kept)
    fs.pipe_file(f"{BUCKET}/other/in.parquet", _parquet_bytes(rows[:5]))
    with pytest.raises(JobError, match=r"answers\.parquet\.partial holds partial results of another job"):
        prepare_job(f"s3://{BUCKET}/other/in.parquet", dest, config=store_pipeline.config, notify=lambda m: None)


def _parquet_bytes(rows) -> bytes:
    buf = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue().to_pybytes()


def test_missing_bucket_and_bad_credentials_are_clear_errors(store_pipeline, s3, tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(_rows(2, seed=2)), src)
    with pytest.raises(JobError) as err:
        run_job(store_pipeline, src, "s3://no-such-bucket/out.parquet", progress=False, notify=lambda m: None)
    assert "s3://no-such-bucket/out.parquet: the bucket does not exist" in str(err.value)
    with pytest.raises(JobError) as err:
        run_job(
            store_pipeline,
            "s3://no-such-bucket/in.parquet",
            tmp_path / "out.parquet",
            progress=False,
            notify=lambda m: None,
        )
    assert "no-such-bucket" in str(err.value) and ("does not exist" in str(err.value) or "not found" in str(err.value))

    def auth(count: str) -> None:  # the server checks credentials after this many more requests ("inf": never)
        import urllib.request

        urllib.request.urlopen(
            urllib.request.Request(
                f"{s3['endpoint_url']}/moto-api/reset-auth",
                data=count.encode(),
                headers={"Content-Type": "text/plain"},
                method="POST",
            )
        ).read()

    bad = load_config().replace(storage_options={**s3, "key": "not-a-key", "secret": "nope"})
    from pipeline.jobs.job import prepare_job

    auth("0")
    try:
        with pytest.raises(JobError) as err:
            prepare_job(src, f"s3://{BUCKET}/denied.parquet", config=bad, notify=lambda m: None)
    finally:
        auth("inf")
    assert f"access to s3://{BUCKET}/denied.parquet was refused" in str(err.value)
    assert "check the credentials" in str(err.value)


def test_killed_job_on_s3_resumes_to_the_whole_output(s3, tmp_path):
    base = load_config().replace(scheduler={"dashboard_address": None}, storage_options=s3)
    config, slow = tmp_path / "cluster.yaml", tmp_path / "slow.yaml"
    config.write_text(yaml.safe_dump(base.model_dump()))
    slow.write_text(yaml.safe_dump(base.replace(engine={"null_latency_s": 1.0}).model_dump()))
    rows = _rows(250, seed=3)
    fs = _fs(s3)
    with fs.open(f"{BUCKET}/resume/in.parquet", "wb") as f:
        pq.write_table(pa.Table.from_pylist(rows), f)
    src, out = f"s3://{BUCKET}/resume/in.parquet", f"s3://{BUCKET}/resume/out.parquet"

    def cli(cfg):
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pipeline",
                "run",
                src,
                out,
                "--engine",
                "fake",
                "--part-rows",
                "50",
                "--quiet",
                "--config",
                str(cfg),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    proc = cli(slow)
    answers = f"{BUCKET}/resume/out.parquet.partial/answers"

    def committed() -> int:  # rows in the answer objects the workers wrote (each written whole)
        fs.invalidate_cache()
        return sum(pq.ParquetFile(fs.open(f)).metadata.num_rows for f in fs.glob(f"{answers}/*/*.parquet"))

    deadline = time.monotonic() + 240
    while True:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no answers committed in time"
        if committed() >= 150:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(1.0)  # (an upload the server had whole when the workers died lands meanwhile)
    fs.invalidate_cache()
    assert not fs.exists(f"{BUCKET}/resume/out.parquet")
    done = committed()
    assert 150 <= done < len(rows)

    resumed = cli(config)
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert f"resuming: {done} of {len(rows)} rows are already in s3://{BUCKET}/resume/out.parquet.partial" in err
    fs.invalidate_cache()
    got = pq.read_table(f"{BUCKET}/resume/out.parquet", filesystem=fs)
    assert got.column("id").to_pylist() == [r["id"] for r in rows]
    assert got.column("error").null_count == len(rows)
    assert not fs.exists(f"{BUCKET}/resume/out.parquet.partial")


def test_dask_dataframe_from_s3_back_to_s3(store_pipeline, s3):
    import dask.dataframe as dd
    import pandas as pd

    rows = _rows(10, seed=6)
    fs = _fs(s3)
    for i, (lo, hi) in enumerate(((0, 7), (7, 30), (30, 40))):  # three files of uneven size
        with fs.open(f"{BUCKET}/frame/in/part-{i}.parquet", "wb") as f:
            pq.write_table(pa.Table.from_pylist(rows[lo:hi]), f)
    ddf = dd.read_parquet(f"s3://{BUCKET}/frame/in/", storage_options=s3).set_index("id", sort=False)
    answers = store_pipeline.map_dataframe(ddf)
    answers.to_parquet(f"s3://{BUCKET}/frame/out/", storage_options=s3)
    back = dd.read_parquet(f"s3://{BUCKET}/frame/out/", storage_options=s3).compute()
    assert list(back.index) == [r["id"] for r in rows] and back["error"].isna().all()
    assert isinstance(back, pd.DataFrame) and answers.npartitions == 3


def _chat_lines(n):
    return [
        {
            "custom_id": f"r{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"messages": [{"role": "user", "content": f"Say {i}"}], "max_tokens": 4},
        }
        for i in range(n)
    ]


def test_openai_batch_jsonl_on_s3(store_pipeline, s3):
    import json

    fs = _fs(s3)
    lines = _chat_lines(9) + ["not json"]
    fs.pipe_file(
        f"{BUCKET}/batch/in.jsonl", "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines).encode()
    )
    src = f"s3://{BUCKET}/batch/in.jsonl"
    summary = run_job(
        store_pipeline, src, f"s3://{BUCKET}/batch/reference.jsonl", progress=False, part_rows=3, notify=lambda m: None
    )
    assert summary.rows == 10 and summary.errors == 1
    reference = fs.cat_file(f"{BUCKET}/batch/reference.jsonl").decode().splitlines()
    out = [json.loads(x) for x in reference]
    assert [o["custom_id"] for o in out] == [f"r{i}" for i in range(9)] + [None]
    assert all(o["response"]["status_code"] == 200 for o in out[:9]) and out[9]["error"]["code"] == "input"


def test_job_from_s3_to_a_local_file_runs_on_the_cluster(store_pipeline, s3, tmp_path):
    """The workers read the input from the object store themselves (the job's spec carries the
    store's settings); a resumed job refuses an input object rewritten under its answers."""
    from pipeline.data.answer_files import ANSWER_SCHEMA, AnswerFiles
    from pipeline.data.storage import filesystem
    from pipeline.jobs.cluster_job import ClusterJob

    rows = _rows(12, seed=7)
    fs = _fs(s3)
    _put_two_files(fs, "to-local", rows, 20)
    out = tmp_path / "answers.parquet"
    job = prepare_job(f"s3://{BUCKET}/to-local/", out, config=store_pipeline.config, notify=lambda m: None)
    assert isinstance(job, ClusterJob)
    summary = job.run(store_pipeline, progress=False)
    got = pq.read_table(out)
    assert got.column("id").to_pylist() == [r["id"] for r in rows] and got.column("error").null_count == len(rows)
    assert summary.rows == len(rows) and len(summary.per_shard) == 2

    out2 = tmp_path / "again.parquet"
    first = prepare_job(f"s3://{BUCKET}/to-local/", out2, config=store_pipeline.config, notify=lambda m: None)
    kept = pa.Table.from_arrays(
        [pa.array([0], f.type) if f.name == "position" else pa.nulls(1, f.type) for f in ANSWER_SCHEMA],
        schema=ANSWER_SCHEMA,
    )
    AnswerFiles(first.sink.folder).write(0, "old-b000000-00000", kept)
    with fs.open(f"{BUCKET}/to-local/part-0.parquet", "wb") as f:  # rewritten: same rows, another order
        pq.write_table(pa.Table.from_pylist(list(reversed(rows[:20]))), f)
    filesystem(f"s3://{BUCKET}/", s3)[0].invalidate_cache()  # (this process's cached listing, as a new one has none)
    with pytest.raises(JobError, match=r"part-0\.parquet changed since this job started"):
        prepare_job(f"s3://{BUCKET}/to-local/", out2, config=store_pipeline.config, notify=lambda m: None)


def test_an_adapter_at_a_url_is_fetched_once_and_answers_its_rows(s3, tmp_path):
    from safetensors.numpy import save_file

    from pipeline.model import resolve_model

    local = tmp_path / "adapter"
    local.mkdir()
    (local / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    save_file({"q_proj.lora_A.weight": np.zeros((4, 4), np.float32)}, str(local / "adapter_model.safetensors"))
    fs = _fs(s3)
    fs.put(str(local) + "/", f"{BUCKET}/adapters/terse/", recursive=True)
    url = f"s3://{BUCKET}/adapters/terse"
    # (the cache folder a fetched adapter is kept in: this test's; the model named by its path)
    config = load_config().replace(
        scheduler={"dashboard_address": None},
        storage_options=s3,
        model={"path": resolve_model(load_config()), "cache_dir": str(tmp_path / "cache"), "adapters": {"terse": url}},
    )
    src = tmp_path / "in.parquet"
    pq.write_table(
        pa.table(
            {
                "document": ["d1", "d2", "d1"],
                "question": ["a", "b", "c"],
                "adapter": ["terse", f"s3://{BUCKET}/adapters/nosuch", url],
            }
        ),
        src,
    )
    with Pipeline(config, engine="fake") as p:
        run_job(p, src, tmp_path / "out.parquet", progress=False)
    rows = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [r["answer"] for r in rows] == ["terse", None, url] and rows[0]["error"] is None, rows
    assert (
        rows[1]["error"] == f"input: adapter 's3://{BUCKET}/adapters/nosuch': nothing at s3://{BUCKET}/adapters/nosuch"
    )
    fetched = list((tmp_path / "cache" / "adapters").iterdir())
    assert len(fetched) == 1 and (fetched[0] / "adapter_config.json").is_file()  # (one fetch for both names)
