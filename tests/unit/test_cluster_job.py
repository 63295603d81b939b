"""File jobs on the cluster with the fake engine: the workers read, group by document, answer
and write. The output is ``Pipeline.run``'s on the same rows, row for row; every document is
answered on one shard; an interrupted or partly unreadable job resumes to the same output,
answering only what is missing."""

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers.dead_engine import kill_engine
from pipeline import JobError, Pipeline, load_config, prepare_job
from pipeline.bench.workloads import document_questions
from pipeline.data.answer_files import ANSWER_SCHEMA, AnswerFiles
from pipeline.jobs.cluster_job import ClusterJob

COMPARED = ("answer", "error", "prompt_tokens", "completion_tokens", "finish_reason")


@pytest.fixture(scope="module")
def null_pipeline():
    config = load_config().replace(
        scheduler={"dashboard_address": None},
        engine={"max_model_len": 1000, "null_kv_cache_tokens": 3000},
        sampling={"max_tokens": 32},
        intake={"read_ahead_rows": 50},
        jobs={"partition_rows": 16, "bucket_rows": 20},
    )
    with Pipeline(config, engine="fake") as p:
        yield p


def rows_with_bad_ones(n_docs=12, per_doc=4):
    rows = [
        {**r, "document": r["document"][:300]} for r in document_questions(n_docs, per_doc, seed=5, order="shuffled")
    ]
    rows[3] = {**rows[3], "document": None}
    rows[10] = {**rows[10], "question": " "}
    return rows


def job(p, src, out, **options):
    return prepare_job(src, out, config=p.config, notify=lambda m: None, **options)


def test_file_output_is_pipeline_runs_row_for_row(null_pipeline, tmp_path):
    rows = rows_with_bad_ones()
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src, row_group_size=10)
    on_cluster = job(null_pipeline, src, tmp_path / "cluster.parquet")
    assert isinstance(on_cluster, ClusterJob) and len(on_cluster.sink.partitions) == 5
    summary = on_cluster.run(null_pipeline, progress=False)
    out = pq.read_table(tmp_path / "cluster.parquet").to_pylist()
    from_python = null_pipeline.run(rows)
    assert [{k: o[k] for k in COMPARED} for o in out] == [{k: getattr(r, k) for k in COMPARED} for r in from_python]
    assert [o["id"] for o in out] == [r.id for r in from_python]
    assert [o["id"] for o in out] == [r["id"] for r in rows]
    assert out[3]["error"] == "input: document is null" and out[10]["error"] == "input: question is empty"
    assert summary.rows == len(rows) and summary.errors == 2
    assert summary.errors_by_kind == {"input: document is null": 1, "input: question is empty": 1}
    assert sum(summary.per_shard.values()) == len(rows) - 2 and len(summary.per_shard) == 2
    # grouped by document: each document on one shard, its prefix computed once there
    shards: dict = {}
    for r, o in zip(rows, out):
        if o["error"] is None:
            shards.setdefault(r["document"], set()).add(o["shard"])
    assert all(len(s) == 1 for s in shards.values())
    assert summary.cached_tokens > 0
    assert not (tmp_path / "cluster.parquet.partial").exists()


def test_interrupted_job_resumes_answering_only_the_rest(null_pipeline, tmp_path):
    rows = rows_with_bad_ones(8, 3)
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src, row_group_size=8)
    job(null_pipeline, src, tmp_path / "whole.parquet").run(null_pipeline, progress=False)
    whole = pq.read_table(tmp_path / "whole.parquet")

    # a run that committed partition 0's answers and half of partition 1's, and was killed
    # while writing another file
    first = job(null_pipeline, src, tmp_path / "out.parquet")
    files = AnswerFiles(first.sink.folder)
    answers = whole.select([n for n in ANSWER_SCHEMA.names[1:] if n in whole.column_names])
    answers = answers.add_column(0, "position", pa.array(range(len(rows))))
    for f in ANSWER_SCHEMA:  # (no JSON, log-probabilities or several answers asked for)
        if f.name not in answers.column_names:
            answers = answers.append_column(f.name, pa.nulls(len(rows), f.type))
    answers = answers.select(ANSWER_SCHEMA.names)
    p0, p1 = first.sink.partitions
    assert (p0.rows, p1.rows) == (16, 8)
    files.write(0, "old-b000000", answers.slice(0, 16).cast(ANSWER_SCHEMA))
    files.write(1, "old-b000001", answers.slice(16, 4).cast(ANSWER_SCHEMA))
    (Path(files.folder.path("answers", "p000001")) / ".old-b000002.parquet.tmp").write_bytes(b"PAR1 torn")

    notes = []
    again = prepare_job(src, tmp_path / "out.parquet", config=null_pipeline.config, notify=notes.append)
    assert again.done == 20 and notes == [
        f"resuming: 20 of {len(rows)} rows are already in {again.sink.dir}; answering the rest"
    ]
    assert not list(Path(files.folder.path("answers", "p000001")).glob(".*.tmp"))
    summary = again.run(null_pipeline, progress=False)
    assert summary.rows == len(rows) - 20 and summary.resumed == 20

    def without(rows):  # (where two runs may differ)
        return [{k: v for k, v in r.items() if k not in ("latency_s", "shard", "cached_tokens")} for r in rows]

    assert without(pq.read_table(tmp_path / "out.parquet").to_pylist()) == without(whole.to_pylist())


def test_unreadable_file_stops_the_job_after_committing_the_rest(null_pipeline, tmp_path, corrupt_second_file):
    rows = rows_with_bad_ones(10, 4)
    folder = tmp_path / "in"
    good = corrupt_second_file(folder, rows, 24)

    first = job(null_pipeline, folder, tmp_path / "out.parquet")
    with pytest.raises(JobError, match=r"cannot read .*b\.parquet: .*run the same command again to resume"):
        first.run(null_pipeline, progress=False)
    assert not (tmp_path / "out.parquet").exists() and first.done == 24
    (folder / "b.parquet").write_bytes(good)  # fixed
    summary = job(null_pipeline, folder, tmp_path / "out.parquet").run(null_pipeline, progress=False)
    assert summary.rows == len(rows) - 24
    assert pq.read_table(tmp_path / "out.parquet").column("id").to_pylist() == [r["id"] for r in rows]


def test_ids_used_twice_are_refused_by_the_workers_before_any_answer(null_pipeline, tmp_path):
    """A job larger than a partition has its ids checked on the workers: refused with the ids
    and their counts, nothing answered or left behind (not even the rows that failed reading);
    allowed, every row is answered."""
    rows = rows_with_bad_ones(10, 4)  # 40 rows, 3 partitions of 16
    rows[37] = {**rows[37], "id": rows[1]["id"]}
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    refused = job(null_pipeline, src, tmp_path / "out.parquet")
    with pytest.raises(
        JobError,
        match=rf"1 id value\(s\) used by more than one row: {rows[1]['id']!r} \(2 times\)"
        r".*--allow-duplicate-ids",
    ):
        refused.run(null_pipeline, progress=False)
    assert not (tmp_path / "out.parquet").exists() and not (tmp_path / "out.parquet.partial").exists()
    summary = job(null_pipeline, src, tmp_path / "out.parquet", allow_duplicate_ids=True).run(
        null_pipeline, progress=False
    )
    assert summary.rows == 40
    assert pq.read_table(tmp_path / "out.parquet").column("id").to_pylist() == [r["id"] for r in rows]


def test_a_folder_in_the_partial_outputs_place_is_not_taken_over(null_pipeline, tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows_with_bad_ones(4, 3)), src)
    (tmp_path / "out.parquet.partial").mkdir()
    (tmp_path / "out.parquet.partial" / "notes.txt").write_text("mine")
    with pytest.raises(JobError, match=r"out\.parquet\.partial exists but is not a partial output of this program"):
        job(null_pipeline, src, tmp_path / "out.parquet")
    (tmp_path / "out.parquet.partial" / "_job.json").write_text("{not json")
    with pytest.raises(JobError, match=r"not a partial output of this program \(unreadable _job\.json\)"):
        job(null_pipeline, src, tmp_path / "out.parquet")
    assert (tmp_path / "out.parquet.partial" / "notes.txt").read_text() == "mine"


def chat_line(custom_id, content, **body):
    return json.dumps(
        {
            "custom_id": custom_id,
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"messages": [{"role": "user", "content": content}], **body},
        }
    )


def batch_file(path, n=24):
    """An OpenAI batch file of good and bad requests, blank lines and CRLF endings among them."""
    lines = [chat_line(f"r{i}", f"Question {i % 5}: " + "why? " * (i % 7), max_tokens=4 + i % 3) for i in range(n)]
    lines[2] = "this is not json"
    lines[5] = chat_line("r5", "hi", temperature="hot")
    lines[7] = json.dumps({"custom_id": "r7", "method": "POST", "url": "/v1/chat/completions", "body": {}})
    lines[9] = chat_line("r9", "hi", n=0)
    lines[11] = chat_line("r11", "hi", stop="END", seed=3, response_format={"type": "json_object"})
    lines[13] = chat_line("r13", "hi", tools=[{"type": "function"}])
    data = "\n".join(lines[:6]) + "\n\n  \n" + "\r\n".join(lines[6:12]) + "\r\n" + "\n".join(lines[12:]) + "\n"
    path.write_bytes(data.encode().replace(b"Question 3", b"Question \xff3"))
    return path


def test_openai_batch_jsonl_on_the_cluster_line_for_line(null_pipeline, tmp_path):
    """The workers read the file in blocks of bytes (cut at line ends); every line is answered
    once, with its own error where it has one, in input order."""
    src = batch_file(tmp_path / "batch.jsonl")
    config = null_pipeline.config.replace(jobs={"partition_bytes": 700})
    on_cluster = prepare_job(src, tmp_path / "cluster.jsonl", config=config, notify=lambda m: None)
    assert isinstance(on_cluster, ClusterJob) and len(on_cluster.sink.partitions) > 4
    summary = on_cluster.run(null_pipeline, progress=False)
    cluster = [without_created(x) for x in (tmp_path / "cluster.jsonl").read_text().splitlines()]
    assert len(cluster) == 24
    assert [o["custom_id"] for o in cluster][:8] == ["r0", "r1", None, None, "r4", "r5", "r6", "r7"]
    errors = [o["error"]["message"] if o["error"] else None for o in cluster]
    assert errors[2].startswith("input: line is not valid JSON") and "temperature" in errors[5]
    assert errors[7] == "input: messages is missing" and errors[9] == "input: n must be an integer >= 1 (got 0)"
    assert errors[13] == "input: body.tools[0].function is missing" and "UTF-8" in errors[3]
    assert errors[11].startswith("output: answer is not valid JSON")  # (its response_format went with it)
    assert {o["error"]["code"] for o in cluster if o["error"]} == {"input", "output"}
    assert sum(e is not None for e in errors) == summary.errors
    assert summary.rows == 24 and not (tmp_path / "cluster.jsonl.partial").exists()


def without_created(line):
    """An output line without its start time, or its cached tokens (where the paths may differ)."""
    out = json.loads(line)
    if out["response"]["body"]:
        del out["response"]["body"]["created"]
        del out["response"]["body"]["usage"]["prompt_tokens_details"]
    return out


def test_openai_batch_jsonl_on_the_cluster_resumes_and_refuses_repeated_custom_ids(null_pipeline, tmp_path):
    from pipeline.steps.jsonl_input import block_lines

    src = batch_file(tmp_path / "batch.jsonl")
    config = null_pipeline.config.replace(jobs={"partition_bytes": 700})
    first = prepare_job(src, tmp_path / "out.jsonl", config=config, notify=lambda m: None)
    block = first.sink.partitions[0]
    n0 = len(block_lines(first.steps.source, block))  # a run that committed block 0's answers, then was killed
    assert n0 > 0 and len(first.sink.partitions) > 4
    kept = pa.table(
        {
            "position": pa.array(range(block.start, block.start + n0), pa.int64()),
            "answer": ["kept"] * n0,
            "prompt_tokens": [1] * n0,
            "cached_tokens": [0] * n0,
            "completion_tokens": [0] * n0,
        }
    )
    AnswerFiles(first.sink.folder).write(
        0,
        "old-b000000-00000",
        pa.Table.from_arrays(
            [kept.column(f.name) if f.name in kept.column_names else pa.nulls(n0, f.type) for f in ANSWER_SCHEMA],
            schema=ANSWER_SCHEMA,
        ),
    )
    notes = []
    again = prepare_job(src, tmp_path / "out.jsonl", config=config, notify=notes.append)
    assert notes == [f"resuming: {n0} rows are already in {again.sink.dir}; answering the rest"]
    summary = again.run(null_pipeline, progress=False)
    assert summary.resumed == n0 and summary.rows == 24 - n0
    out = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [o["id"] for o in out] == [f"pipeline-{i}" for i in range(24)]
    assert [o["response"]["body"]["choices"][0]["message"]["content"] for o in out[:n0]] == ["kept"] * n0
    assert all(
        o["error"] is not None or o["response"]["body"]["choices"][0]["message"]["content"] == "" for o in out[n0:]
    )

    lines = src.read_bytes().splitlines()
    src.write_bytes(b"\n".join(lines + [chat_line("r1", "again").encode(), chat_line("r20", "again").encode()]))
    with pytest.raises(
        JobError,
        match=r"2 custom_id value\(s\) used by more than one row: 'r1' \(2 times\), "
        r"'r20' \(2 times\)",
    ):
        prepare_job(src, tmp_path / "twice.jsonl", config=config, notify=lambda m: None).run(
            null_pipeline, progress=False
        )
    assert not (tmp_path / "twice.jsonl.partial").exists()


def test_a_resumed_openai_batch_job_knows_its_total_from_the_run_that_counted_it(null_pipeline, tmp_path, monkeypatch):
    """A JSONL file's rows are counted as its blocks are read; the partial output records the
    count, so a resumed run's note and progress bar have the total from the start."""
    import pipeline.jobs.file_steps as file_steps

    src = batch_file(tmp_path / "batch.jsonl")
    config = null_pipeline.config.replace(jobs={"partition_bytes": 700})
    first = prepare_job(src, tmp_path / "out.jsonl", config=config, notify=lambda m: None)
    assert first.rows_total is None  # (not read yet)

    def stopped(*args):
        raise RuntimeError("stopped before OUTPUT was written")

    monkeypatch.setattr(file_steps, "finish_task", stopped)
    with pytest.raises(RuntimeError, match="stopped before OUTPUT"):
        first.run(null_pipeline, progress=False)
    monkeypatch.undo()
    notes = []
    again = prepare_job(src, tmp_path / "out.jsonl", config=config, notify=notes.append)
    assert notes == [f"resuming: 24 of 24 rows are already in {again.sink.dir}; answering the rest"]
    assert again.rows_total == 24
    again.run(null_pipeline, progress=False)
    assert [json.loads(x)["id"] for x in (tmp_path / "out.jsonl").read_text().splitlines()] == [
        f"pipeline-{i}" for i in range(24)
    ]


def test_while_buckets_are_answered_the_workers_no_longer_hold_the_read_and_split_rows(tmp_path):
    """Each partition's rows are held once while the buckets are answered (as the pieces its
    shards take), not also as its read and its split: those are let go once split."""
    import threading
    import time

    rows = document_questions(60, 4, seed=8, order="shuffled")
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    config = load_config().replace(
        scheduler={"dashboard_address": None},
        engine={"kind": "fake", "null_latency_s": 0.05},
        intake={"max_in_flight": 2},
        jobs={"partition_rows": 60},
    )
    planning = ("-read-", "-split-", "-piece-", "-figures-", "-documents-", "-place")
    seen: list[dict] = []
    done = threading.Event()

    def states(dask_scheduler):
        return {str(k): ts.state for k, ts in dask_scheduler.tasks.items()}

    def watch(client):
        while not done.is_set():
            now = client.run_on_scheduler(states)
            answering = any("-answer-" in k and s == "processing" for k, s in now.items())
            planned = not any(
                p in k and s in ("waiting", "processing", "no-worker") for k, s in now.items() for p in planning
            )
            if answering and planned:
                seen.append(now)
                return
            time.sleep(0.05)

    with Pipeline(config) as p:
        watcher = threading.Thread(target=watch, args=(p.client,))
        watcher.start()
        try:
            summary = prepare_job(src, tmp_path / "out.parquet", config=config, notify=lambda m: None).run(
                p, progress=False
            )
        finally:
            done.set()
            watcher.join()
    assert seen, "no moment with the planning done and a bucket being answered"
    held = sorted(k for k, s in seen[0].items() if s == "memory")
    assert any("-piece-" in k for k in held)
    assert not [k for k in held if re.search(r"-(read|split)-\d+$", k)], held
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [o["id"] for o in out] == [r["id"] for r in rows] and summary.rows == len(rows)


def test_each_worker_reads_one_partition_at_a_time(null_pipeline, tmp_path):
    """``jobs.reads_per_worker`` (1): a worker turns one input partition into prompt rows at a
    time, though it has threads for more (reads at once only contend for its core and memory);
    every partition is still read and every row answered in order."""
    from distributed import get_task_stream

    rows = document_questions(40, 4, seed=12, order="shuffled")
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src, row_group_size=16)
    workers = null_pipeline.client.scheduler_info(n_workers=-1)["workers"].values()
    assert all(w["resources"].get("read-slots") == 1 for w in workers)
    with get_task_stream(null_pipeline.client) as stream:
        summary = job(null_pipeline, src, tmp_path / "out.parquet").run(null_pipeline, progress=False)
    reads: dict[str, list] = {}
    for t in stream.data:
        if re.search(r"-read-\d+$", str(t["key"])):
            reads.setdefault(t["worker"], []).extend(
                (s["start"], s["stop"]) for s in t["startstops"] if s["action"] == "compute"
            )
    assert sum(map(len, reads.values())) == 10
    for spans in reads.values():
        spans.sort()
        assert all(stop <= start for (_, stop), (start, _) in zip(spans, spans[1:])), spans
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [o["id"] for o in out] == [r["id"] for r in rows] and summary.rows == len(rows)


def test_a_job_larger_than_the_workers_memory_for_it_spills_to_disk_and_answers_every_row(tmp_path):
    """``jobs.worker_memory``: the job's read rows and pieces beyond it go to disk (Dask's
    spilling) and come back when a task needs them; the output is whole and in order."""
    rows = document_questions(60, 4, seed=10, order="shuffled")
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    config = load_config().replace(
        scheduler={"dashboard_address": None},
        engine={"kind": "fake"},
        jobs={"partition_rows": 40, "bucket_rows": 40, "worker_memory": "64kB"},
    )

    def written(dask_worker):
        metrics = getattr(dask_worker.data, "cumulative_metrics", {})
        return metrics.get(("disk-write", "bytes"), 0), metrics.get(("disk-read", "count"), 0)

    with Pipeline(config) as p:
        summary = prepare_job(src, tmp_path / "out.parquet", config=config, notify=lambda m: None).run(
            p, progress=False
        )
        spilled = p.client.run(written)
    assert sum(w for w, _ in spilled.values()) > 64_000 and sum(r for _, r in spilled.values()) > 0, spilled
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [o["id"] for o in out] == [r["id"] for r in rows] and summary.rows == len(rows)
    assert all(o["error"] is None for o in out)


def slow_null_job(tmp_path, seed: int):
    """240 rows in one partition, for the cluster path; the fake engine answers 2 at a time, 0.05 s
    each, so each shard is busy for ~3 s (long enough to hit it mid-bucket)."""
    rows = document_questions(60, 4, seed=seed, order="shuffled")
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src, row_group_size=60)
    config = load_config().replace(
        scheduler={"dashboard_address": None},
        engine={"kind": "fake", "null_latency_s": 0.05},
        intake={"max_in_flight": 2},
        jobs={"partition_rows": 60},
    )
    return rows, src, config


def shard_worker(p, shard: str) -> str:
    """The address of the worker serving ``shard`` now."""
    from pipeline.jobs.recovery import current_workers

    return next(a for a, w in current_workers(p.client).items() if f"shard-{shard}" in (w.get("resources") or {}))


def test_killed_worker_mid_job_loses_and_repeats_no_row(tmp_path):
    """SIGKILL one shard's worker while it answers its bucket: Dask reruns the lost tasks on the
    worker its nanny restarts, which rewrites the same answer files; every row once, in order."""
    import os
    import signal
    import threading

    rows, src, config = slow_null_job(tmp_path, seed=9)
    with Pipeline(config) as p:
        addr = shard_worker(p, "cpu1")
        pid = p.client.run(os.getpid, workers=[addr])[addr]
        job = prepare_job(src, tmp_path / "out.parquet", config=config, notify=lambda m: None)
        # each shard answers ~120 rows, 2 at a time, 0.05 s each: ~3 s; kill after 1 s
        killer = threading.Timer(1.0, os.kill, (pid, signal.SIGKILL))
        killer.start()
        summary = job.run(p, progress=False)
        killer.join()
        addr = shard_worker(p, "cpu1")
        assert p.client.run(os.getpid, workers=[addr])[addr] != pid  # a new worker process
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [o["id"] for o in out] == [r["id"] for r in rows]
    assert all(o["error"] is None and o["answer"] == "" for o in out)
    assert summary.rows == len(rows)


def test_an_engine_dying_mid_job_restarts_its_worker_and_loses_and_repeats_no_row(tmp_path):
    """One shard's engine dies while it answers its bucket: the worker says so, restarts with a
    fresh engine, and Dask runs the bucket again there, skipping the rows it committed; every row
    once, in order, none answered with an error."""
    import os
    import sys
    import threading

    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    rows, src, config = slow_null_job(tmp_path, seed=13)
    with Pipeline(config) as p:
        addr = shard_worker(p, "cpu1")
        pid = p.client.run(os.getpid, workers=[addr])[addr]
        job = prepare_job(src, tmp_path / "out.parquet", config=config, notify=lambda m: None, part_rows=10)
        # each shard answers ~120 rows, 2 at a time, 0.05 s each: ~3 s; the engine dies after 1 s
        killer = threading.Timer(1.0, p.client.run, (kill_engine,), {"workers": [addr]})
        killer.start()
        summary = job.run(p, progress=False)
        killer.join()
        died = p.client.get_events("pipeline-engine-died")
        assert died and died[0][1]["shard"] == "cpu1" and "engine core died" in died[0][1]["error"]
        # (the bucket's rerun ran on the restarted worker: a new process, with a fresh engine)
        addr = shard_worker(p, "cpu1")
        assert p.client.run(os.getpid, workers=[addr])[addr] != pid
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [o["id"] for o in out] == [r["id"] for r in rows]
    assert all(o["error"] is None and o["answer"] == "" for o in out), [o["error"] for o in out if o["error"]][:3]
    assert summary.rows == len(rows) and {o["shard"] for o in out} == {"cpu0", "cpu1"}


def test_resume_refuses_an_input_file_changed_under_its_committed_answers(null_pipeline, tmp_path):
    rows = rows_with_bad_ones(4, 3)
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    first = job(null_pipeline, src, tmp_path / "out.parquet")
    answers = pa.table({"position": [0], "answer": ["kept"]})
    full = pa.Table.from_arrays(
        [answers.column(f.name) if f.name in answers.column_names else pa.nulls(1, f.type) for f in ANSWER_SCHEMA],
        schema=ANSWER_SCHEMA,
    )
    AnswerFiles(first.sink.folder).write(0, "old-b000000-00000", full)
    pq.write_table(pa.Table.from_pylist(list(reversed(rows))), src)  # same rows, another order
    with pytest.raises(JobError, match=r"in\.parquet changed since this job started.*holds answers for its rows"):
        job(null_pipeline, src, tmp_path / "out.parquet")


def test_a_shard_gone_for_good_has_its_buckets_answered_by_the_others(tmp_path):
    """A shard whose worker dies and is not restarted (its nanny told not to): after
    ``recovery.rejoin_timeout_s`` its unfinished buckets move to the live shard; the rows it had
    committed are not answered again; every row once, in order."""
    import os
    import signal
    import threading

    from pipeline.summary import GONE

    rows = document_questions(60, 4, seed=11, order="shuffled")
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    config = load_config().replace(
        scheduler={"dashboard_address": None},
        engine={"kind": "fake", "null_latency_s": 0.05},
        intake={"max_in_flight": 2},
        recovery={"poll_interval_s": 0.2, "rejoin_timeout_s": 1.0},
        jobs={"bucket_rows": 40},
    )
    with Pipeline(config) as p:
        nanny = p._cluster.workers["cpu1"]

        def lose_cpu1():
            nanny.close_gracefully()  # so it does not start a new worker
            os.kill(nanny.pid, signal.SIGKILL)

        job = prepare_job(src, tmp_path / "out.parquet", config=config, part_rows=10, notify=lambda m: None)
        killer = threading.Timer(1.5, lose_cpu1)
        killer.start()
        summary = job.run(p, progress=False)
        killer.join()
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [o["id"] for o in out] == [r["id"] for r in rows]
    assert all(o["error"] is None for o in out)
    assert (GONE, "cpu1") in [(e.kind, e.shard) for e in summary.events]
    assert summary.per_shard["cpu0"] > len(rows) / 2  # cpu0 answered what cpu1 left


def test_a_second_job_beside_a_long_one_is_answered_before_it_ends(tmp_path):
    """Fair sharing: a small job started while a long one has many buckets queued on every
    shard runs its buckets next (the k-th bucket of each job shares one priority), and finds a
    thread for its reads (answer tasks leave one per worker). It ends first, answered whole."""
    import threading

    long_rows = document_questions(240, 4, seed=12, order="shuffled")
    short_rows = document_questions(3, 2, seed=13, order="shuffled")
    for name, rows in (("long", long_rows), ("short", short_rows)):
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / f"{name}.parquet")
    config = load_config().replace(
        scheduler={"dashboard_address": None}, engine={"kind": "fake", "null_latency_s": 0.25}, jobs={"bucket_rows": 8}
    )
    with Pipeline(config) as p:
        # ~60 buckets of 8 rows per shard, 3 at a time, 0.25 s each: ~5 s
        long_job = prepare_job(
            tmp_path / "long.parquet", tmp_path / "long.out.parquet", config=config, notify=lambda m: None
        )
        ran = threading.Thread(target=long_job.run, args=(p,), kwargs={"progress": False})
        ran.start()
        answers = tmp_path / "long.out.parquet.partial" / "answers"
        while ran.is_alive() and not any(answers.rglob("*.parquet")):  # the long job is answering
            ran.join(0.05)
        short = prepare_job(
            tmp_path / "short.parquet", tmp_path / "short.out.parquet", config=config, notify=lambda m: None
        ).run(p, progress=False)
        long_answered = (
            sum(pq.ParquetFile(f).metadata.num_rows for f in answers.rglob("*.parquet"))
            if ran.is_alive()
            else len(long_rows)
        )
        ran.join()
    # (first come, first served, it ended with the long job's last buckets: 97-100 % answered)
    assert long_answered < 0.75 * len(long_rows), f"the short job ended after {long_answered} of the long job's rows"
    assert short.rows == len(short_rows)
    assert [o["id"] for o in pq.read_table(tmp_path / "short.out.parquet").to_pylist()] == [r["id"] for r in short_rows]
    assert pq.read_table(tmp_path / "long.out.parquet").num_rows == len(long_rows)


def test_a_job_stopped_after_its_last_merge_writes_output_on_rerun(null_pipeline, tmp_path, monkeypatch):
    import pipeline.jobs.file_steps as file_steps

    rows = rows_with_bad_ones(4, 3)
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src, row_group_size=5)

    def stopped(*args):
        raise RuntimeError("stopped before OUTPUT was written")

    monkeypatch.setattr(file_steps, "finish_task", stopped)
    with pytest.raises(RuntimeError, match="stopped before OUTPUT"):
        job(null_pipeline, src, out).run(null_pipeline, progress=False)
    monkeypatch.undo()
    again = job(null_pipeline, src, out)
    assert again.done == len(rows) and not again.steps.partitions()  # every partition merged already
    again.run(null_pipeline, progress=False)
    assert [o["id"] for o in pq.read_table(out).to_pylist()] == [r["id"] for r in rows]
