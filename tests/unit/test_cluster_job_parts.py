"""The cluster job's pure parts, without a cluster: partitions planned from row groups, prompt
rows built column-wise exactly as the task builds them row by row, and documents placed on
shards (one shard per document, balanced, held documents kept, buckets bounded) with each
document's text sent once."""

import asyncio

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipeline.client.tokenizer import load_tokenizer
from pipeline.config import load_config
from pipeline.data.input import open_source
from pipeline.data.partitions import plan_partitions
from pipeline.model import model_for
from pipeline.prefix_memory import prefix_digest
from pipeline.steps.cluster_tasks import bucket_slice, place_task, split_task
from pipeline.steps.placement import place_documents
from pipeline.steps.prompt_table import prompt_rows
from pipeline.worker.admission import FairAdmission
from pipeline.worker.grouped_answers import prefixes_of
from tasks import Columns, DocumentQuestion, PromptTemplate


def test_partitions_cover_every_row_once_in_order():
    groups = [[10, 10, 10], [50], [3], [0, 7]]
    parts = plan_partitions(groups, 20)
    assert [p.start for p in parts] == [0] + [sum(p.rows for p in parts[:i]) for i in range(1, len(parts))]
    assert sum(p.rows for p in parts) == 90
    assert all(p.rows <= 20 or len(p.row_groups) == 1 for p in parts)
    big = [p for p in parts if p.file == 1]  # 50 rows > 2 x 20: read in slices of one row group
    assert [(p.skip, p.rows) for p in big] == [(0, 17), (17, 17), (34, 16)]
    assert [p.index for p in parts] == list(range(len(parts)))
    with pytest.raises(ValueError):
        plan_partitions(groups, 0)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(model_for(load_config(), "fake"))


def _source(tmp_path, table, columns):
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=7)
    return open_source(tmp_path / "in.parquet", "parquet", columns)


def test_prompt_rows_match_the_tasks_own_split_and_errors(tmp_path, tokenizer):
    docs = ["alpha doc", "beta doc", None, "gamma", "  ", "alpha doc", "ünïcode ✓ doc", "beta doc"]
    questions = ["q1", "q2", "q3", None, "q5", "q6", "q7 ✓", ""]
    table = pa.table({"id": [f"r{i}" for i in range(8)], "document": docs, "question": questions})
    source = _source(tmp_path, table, Columns(required=("document", "question")))
    task = DocumentQuestion(tokenizer, system="Be brief.")
    (part,) = plan_partitions(source.row_groups, 100)
    got = prompt_rows(source, task, part)
    rows = {r["position"]: r for r in got.rows.to_pylist()}
    errors = dict(zip(got.errors.column("position").to_pylist(), got.errors.column("error").to_pylist()))
    assert sorted(rows) + sorted(errors) == [0, 1, 5, 6, 2, 3, 4, 7]
    assert errors == {
        2: "input: document is null",
        3: "input: question is null",
        4: "input: document is empty",
        7: "input: question is empty",
    }
    prefixes = prefixes_of(got.rows)
    for i in rows:
        want = task.split({"document": docs[i], "question": questions[i]})
        assert (prefixes[rows[i]["digest"]], rows[i]["suffix"]) == (want.prefix, want.suffix)
        assert rows[i]["digest"] == prefix_digest(want.prefix)
    # a document's text travels once: on the first of its rows (rows 0 and 5 share "alpha doc")
    assert [rows[i]["prefix"] is not None for i in sorted(rows)] == [True, True, False, True]
    documents = {d["digest"]: d for d in got.documents.to_pylist()}
    assert len(documents) == 3 and sum(d["rows"] for d in documents.values()) == 4


def test_prompt_rows_row_by_row_when_columns_are_not_plain_text(tmp_path, tokenizer):
    table = pa.table({"text": pa.array([b"fine", b"\xff\xfe bad", b"also fine"], pa.binary()), "n": [1, 2, None]})
    source = _source(tmp_path, table, Columns(required=("text", "n")))
    task = PromptTemplate(tokenizer, "{text}\n\nNumber {n}")
    (part,) = plan_partitions(source.row_groups, 100)
    got = prompt_rows(source, task, part, done=pa.array([0], pa.int64()))  # row 0: answered before
    assert got.rows.column("position").to_pylist() == []
    assert dict(zip(got.errors.column("position").to_pylist(), got.errors.column("error").to_pylist())) == {
        1: "input: text is not valid UTF-8 text (byte 0)",
        2: "input: n is null",
    }


def test_digests_of_a_column_are_the_digests_the_engines_remember():
    """The read digests documents in one pass; the workers remember held documents one at a
    time: both must give the same 64-bit digest, or held documents would not be found."""
    from pipeline.prefix_memory import text_digests

    texts = ["alpha", "ünïcode ✓", "x" * 5000, "", "omega"]
    for kind in (pa.string(), pa.large_string()):
        column = pa.array(texts, kind)
        assert text_digests(column).tolist() == [prefix_digest(t) for t in texts]
        assert text_digests(column.slice(1, 3)).tolist() == [prefix_digest(t) for t in texts[1:4]]
    assert text_digests(pa.array(["", ""])).tolist() == [prefix_digest("")] * 2


def test_a_document_column_is_coded_by_the_digest_of_its_prompt_prefix():
    """The read tells documents apart by the digest of the prefix each one makes (template
    head + document + tail): one code per distinct document, its digest the one the engines
    remember for that prefix, its first row; a null row has no code."""
    from pipeline.prefix_memory import digest_codes

    docs = ["b", None, "a", "b", "", "ünï", None, "a", ""]
    for kind in (pa.string(), pa.large_string()):
        codes, digests, first = digest_codes(pa.array(["z"] + docs, kind).slice(1), "Document: ", "\n\nQ: ")
        assert codes.to_pylist() == [0, None, 1, 0, 2, 3, None, 1, 2]
        assert digests.tolist() == [prefix_digest(f"Document: {d}\n\nQ: ") for d in ["b", "a", "", "ünï"]]
        assert first.tolist() == [0, 2, 4, 5]


def test_a_partition_carries_each_prefix_once_on_its_first_kept_row(tmp_path, tokenizer):
    """Each document's prefix text rides on the first of its rows that did not fail (a view of
    the read's one copy of it), null on its other rows; a document whose first row failed still
    comes with its text."""
    table = pa.table(
        {"document": ["d1", "d2", "d1", "d3", "d2", "d3"], "question": ["", "q2", "q3", "q4", "q5", "q6"]}
    )  # row 0 fails: its question is empty
    source = _source(tmp_path, table, Columns(required=("document", "question")))
    task = DocumentQuestion(tokenizer, system="Be brief.")
    assert isinstance(task, PromptTemplate)  # (the column-wise path)
    got = prompt_rows(source, task, plan_partitions(source.row_groups, 100)[0])
    rows = got.rows.to_pylist()
    assert [r["position"] for r in rows] == [1, 2, 3, 4, 5]
    assert got.errors.column("position").to_pylist() == [0]
    want = {d: task.split({"document": d, "question": "q"}).prefix for d in ("d1", "d2", "d3")}
    assert [r["prefix"] for r in rows] == [want["d2"], want["d1"], want["d3"], None, None]
    assert [r["digest"] for r in rows] == [prefix_digest(want[d]) for d in ("d2", "d1", "d3", "d2", "d3")]


def test_split_sends_each_document_whole_to_one_bucket_with_its_text_once(tmp_path, tokenizer):
    rng = np.random.default_rng(3)
    docs = [f"document {d} " + "text " * (d + 1) for d in rng.integers(0, 9, 60)]  # 9 documents, shuffled
    table = pa.table({"document": docs, "question": [f"question {i}" for i in range(60)]})
    source = _source(tmp_path, table, Columns(required=("document", "question")))
    task = DocumentQuestion(tokenizer)
    parts = plan_partitions(source.row_groups, 20)
    reads = [(prompt_rows(source, task, p), None) for p in parts]
    placement = place_task(["cpu0", "cpu1"], {}, 20, 0, *(r.documents for r, _ in reads))
    assert not placement.split and len(placement.buckets) > 2
    pieces = [split_task(r, placement) for r in reads]
    shard_of = {b.index: b.shard for b in placement.buckets}
    for piece in pieces:  # one piece per shard a partition has rows for, holding that shard's buckets in order
        for shard, rows in piece.items():
            numbers = rows.column("bucket").to_pylist()
            assert numbers == sorted(numbers) and {shard_of[n] for n in numbers} == {shard}
    by_bucket = {
        b.index: pa.concat_tables([t for p in pieces if (t := bucket_slice(p.get(b.shard), b.index))])
        for b in placement.buckets
    }
    assert sum(t.num_rows for t in by_bucket.values()) == 60
    assert all("bucket" not in t.column_names for t in by_bucket.values())
    buckets_of_document = {}
    for b, rows in by_bucket.items():
        for d in set(rows.column("digest").to_pylist()):
            buckets_of_document.setdefault(d, set()).add(b)
    assert len(buckets_of_document) == 9 and all(len(b) == 1 for b in buckets_of_document.values())
    everything = pa.concat_tables(by_bucket.values())
    carriers = everything.filter(pc.is_valid(everything.column("prefix")))
    assert carriers.num_rows == 9  # each document's text once in the whole job, on its first row
    for row in carriers.to_pylist():
        first = min(
            i
            for i, d in enumerate(docs)
            if prefix_digest(task.split({"document": d, "question": "x"}).prefix) == row["digest"]
        )
        assert row["position"] == first
        assert row["prefix"] == task.split({"document": docs[first], "question": "x"}).prefix


def test_placement_keeps_documents_whole_balanced_and_held_ones_in_place():
    rng = np.random.default_rng(0)
    n = 2000
    digests = rng.permutation(np.arange(n, dtype=np.uint64) * np.uint64(2**40 + 7) + np.uint64(12345))
    rows = rng.integers(1, 5, n)
    rows[:5] = 400  # a skewed job: a few documents with many rows
    cost = rows * 100.0 + 1500
    held = {int(digests[7]): "b", int(digests[8]): "c", int(digests[9]): "gone"}
    p = place_documents(digests, rows, cost, ["a", "b", "c"], held, bucket_rows=500)
    shard = {b.index: b.shard for b in p.buckets}
    of = {int(d): shard[int(b)] for d, b in zip(p.digests, p.bucket)}
    assert of[int(digests[7])] == "b" and of[int(digests[8])] == "c" and of[int(digests[9])] in "abc"
    load = {s: 0.0 for s in "abc"}
    for d, c in zip(digests, cost):
        load[of[int(d)]] += c
    assert max(load.values()) / min(load.values()) < 1.05
    assert sum(b.rows for b in p.buckets) == rows.sum()
    assert all(b.rows <= 500 for b in p.buckets) and not p.split
    assert list(p.bucket_of(digests[:3])) == [of_b for of_b in p.bucket[np.searchsorted(p.digests, digests[:3])]]
    with pytest.raises(ValueError, match="no live shard"):
        place_documents(digests, rows, cost, [])


def test_a_document_larger_than_a_bucket_is_split_into_chunks_each_with_its_text(tmp_path, tokenizer):
    """A ``generate``-like job: every row shares one prompt head. Its rows are cut into chunks
    (position modulo their number) spread over the shards; each bucket that answers a chunk
    gets the document's text; no row is lost or doubled."""
    table = pa.table(
        {
            "document": ["the one shared head"] * 57 + ["another doc"] * 3,
            "question": [f"question {i}" for i in range(60)],
        }
    )
    source = _source(tmp_path, table, Columns(required=("document", "question")))
    task = DocumentQuestion(tokenizer)
    reads = [(prompt_rows(source, task, p), None) for p in plan_partitions(source.row_groups, 20)]
    placement = place_task(["cpu0", "cpu1"], {}, 8, 0, *(r.documents for r, _ in reads))
    head = prefix_digest(task.split({"document": "the one shared head", "question": "x"}).prefix)
    assert list(placement.split) == [head] and len(placement.split[head]) == 8  # 57 rows, chunks of at most 8
    assert all(b.rows <= 8 for b in placement.buckets)
    assert {b.shard for b in placement.buckets} == {"cpu0", "cpu1"}
    shard_rows = rows_by_shard(placement)
    assert abs(shard_rows["cpu0"] - shard_rows["cpu1"]) <= 8
    pieces = [split_task(r, placement) for r in reads]
    by_bucket = {
        b.index: pa.concat_tables([t for p in pieces if (t := bucket_slice(p.get(b.shard), b.index))])
        for b in placement.buckets
    }
    positions = sorted(p for t in by_bucket.values() for p in t.column("position").to_pylist())
    assert positions == list(range(60))
    assert sum(b.rows for b in placement.buckets) == 60
    for b, rows in by_bucket.items():
        texts = prefixes_of(rows)
        assert set(texts) == set(rows.column("digest").to_pylist())  # every document here has its text
        if head in texts:
            assert texts[head] == task.split({"document": "the one shared head", "question": "x"}).prefix


def test_a_large_jobs_shared_head_is_split_over_the_shards_a_small_documents_is_not():
    from pipeline.steps.placement import SPLIT_ROWS

    one = np.array([42], np.uint64)
    big = place_documents(one, [4 * SPLIT_ROWS], [4 * SPLIT_ROWS * 10.0], ["a", "b"], bucket_rows=50_000)
    assert len(big.split[42]) == 2 and rows_by_shard(big) == {"a": 2 * SPLIT_ROWS, "b": 2 * SPLIT_ROWS}
    small = place_documents(one, [SPLIT_ROWS - 1], [1.0], ["a", "b"], bucket_rows=50_000)
    assert not small.split and len(small.buckets) == 1  # its questions stay where it is prefilled


def test_grouped_answering_admits_first_rows_until_the_first_answer_then_all():
    """A watched job's first answer is not decoded in lockstep with a full engine's worth of
    others: before it, at most ``first_rows`` requests are in flight; after it, up to
    ``intake.max_in_flight``. Every row gets its own result, in the table's order."""

    from pipeline.worker import metrics
    from pipeline.worker.fake_engine import FakeEngine
    from pipeline.worker.gcstats import GcPauses
    from pipeline.worker.plugin import EnginePlugin

    class Counting(FakeEngine):
        def __init__(self):
            super().__init__(latency_s=0.01)
            self.in_flight = self.most_before_first = self.most = self.answered = 0

        async def generate(self, prompt_ids, request_id, sampling, priority=0):
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            if not self.answered:
                self.most_before_first = max(self.most_before_first, self.in_flight)
            try:
                return await super().generate(prompt_ids, request_id, sampling)
            finally:
                self.in_flight -= 1
                self.answered += 1

    config = load_config().replace(intake={"max_in_flight": 8})
    rows = pa.table(
        {
            "position": pa.array(range(40), pa.int64()),
            "digest": pa.array([7] * 20 + [9] * 20, pa.uint64()),
            "prefix": pa.array(["doc a "] * 20 + ["doc b "] * 20, pa.large_string()),
            "suffix": pa.array([f"q{i}" for i in range(40)], pa.large_string()),
        }
    )
    for first_rows, before in ((1, 1), (0, 8)):
        plugin = EnginePlugin(config, "x", "fake")
        plugin.engine, plugin.shard, plugin.prefixes, plugin.token_gate = Counting(), "cpu0", None, None
        plugin.metrics = metrics.ShardMetrics("cpu0", GcPauses())

        async def run():
            plugin._intake = FairAdmission(config.intake.max_in_flight)
            return await plugin.answer_grouped(rows, "b", config.sampling.as_sampling(0), False, first_rows=first_rows)

        results = asyncio.run(run())
        assert [r.index for r in results] == list(range(40)) and all(r.error is None for r in results)
        assert plugin.engine.most_before_first == before and plugin.engine.most == 8


def test_grouped_answering_stops_when_the_engine_dies_under_requests_that_wait(monkeypatch):
    """The engine core dies mid-bucket while requests wait on it (vLLM's then all fail): the
    answering raises EngineDead (the worker restarts with a fresh engine) once the requests in
    flight have ended, starts no further document, and every row answered before the failure
    went to ``commit`` once, with its own answer, so a rerun skips exactly those."""
    from pipeline.worker import grouped_answers, metrics
    from pipeline.worker.engine import EngineDead
    from pipeline.worker.fake_engine import FakeEngine
    from pipeline.worker.gcstats import GcPauses
    from pipeline.worker.grouped_answers import answer_grouped
    from pipeline.worker.plugin import EnginePlugin

    monkeypatch.setattr(grouped_answers, "HAND_OVER_ROWS", 1)  # each answer handed to commit as it comes

    class Dying(FakeEngine):
        def __init__(self):
            super().__init__()
            self.started = 0

        async def generate(self, prompt_ids, request_id, sampling, priority=0):
            self.started += 1
            n = self.started
            await asyncio.sleep(0.005)
            if n > 12:
                raise EngineDead("vLLM engine core died: EngineDeadError")
            return await super().generate(prompt_ids, request_id, sampling)

    config = load_config().replace(intake={"max_in_flight": 4})
    rows = pa.table(
        {
            "position": pa.array(range(100, 140), pa.int64()),
            "digest": pa.array([d for d in range(10) for _ in range(4)], pa.uint64()),
            "prefix": pa.array([f"doc {i // 4} " if i % 4 == 0 else None for i in range(40)], pa.large_string()),
            "suffix": pa.array([f"q{i}" for i in range(40)], pa.large_string()),
        }
    )
    plugin = EnginePlugin(config, "x", "fake")
    plugin.engine, plugin.shard, plugin.prefixes, plugin.token_gate = Dying(), "cpu0", None, None
    plugin.metrics = metrics.ShardMetrics("cpu0", GcPauses())
    committed = []

    async def run():
        plugin._intake = FairAdmission(config.intake.max_in_flight)
        with pytest.raises(EngineDead, match="engine core died"):
            await answer_grouped(plugin, rows, "b", config.sampling.as_sampling(0), False, commit=committed.extend)

    asyncio.run(run())
    answered = sorted(r.index for r in committed)
    assert len(answered) == len(set(answered)) == 12 and all(r.error is None for r in committed)
    assert set(answered) <= set(range(100, 140))
    assert plugin.engine.started < 40  # it stopped early: no further document started
    assert plugin.metrics.in_flight == 0 and plugin.metrics.queued == 0


def test_a_request_cancelled_before_its_task_first_runs_still_stops_where_it_waits():
    """A row's request is started at once and handed to a Task only where it must wait; a
    release that lands before that Task's first step must still reach the request (its
    ``finally`` aborts it and settles the counters), not leave it suspended with the Task gone."""
    from pipeline.worker.grouped_answers import start_eagerly

    stopped = []

    async def request():
        try:
            await asyncio.sleep(30)
        finally:
            stopped.append(True)

    async def main():
        task, _ = start_eagerly(request())
        task.cancel()  # (before the loop has run the Task once)
        await asyncio.gather(task, return_exceptions=True)
        return task, list(stopped)

    task, seen = asyncio.run(main())
    assert seen == [True]
    del task


def test_a_task_dask_releases_stops_its_rows_in_flight_and_starts_no_more():
    """Dask releases an answering task (its client cancelled it or is gone): the engine's
    requests in flight are cancelled (vLLM aborts them), no more are started, the task ends
    with a clear error, and the aborted requests count neither as served nor as errors."""
    from pipeline.worker import metrics
    from pipeline.worker.fake_engine import FakeEngine
    from pipeline.worker.gcstats import GcPauses
    from pipeline.worker.plugin import EnginePlugin, TaskReleased

    class Slow(FakeEngine):
        def __init__(self):
            super().__init__(latency_s=30)
            self.started = self.cancelled = 0

        async def generate(self, prompt_ids, request_id, sampling, priority=0):
            self.started += 1
            try:
                return await super().generate(prompt_ids, request_id, sampling)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise

    config = load_config().replace(intake={"max_in_flight": 4})
    rows = pa.table(
        {
            "position": pa.array(range(40), pa.int64()),
            "digest": pa.array([7] * 40, pa.uint64()),
            "prefix": pa.array(["doc a "] + [None] * 39, pa.large_string()),
            "suffix": pa.array([f"q{i}" for i in range(40)], pa.large_string()),
        }
    )
    plugin = EnginePlugin(config, "x", "fake")
    plugin.engine, plugin.shard, plugin.prefixes, plugin.token_gate = Slow(), "cpu0", None, None
    plugin.metrics = metrics.ShardMetrics("cpu0", GcPauses())

    async def run():
        plugin._intake = FairAdmission(config.intake.max_in_flight)
        answering = asyncio.ensure_future(
            plugin.answer_grouped(rows, "b", config.sampling.as_sampling(0), False, task="job-answer-3")
        )
        while plugin.engine.started < 4:
            await asyncio.sleep(0.01)
        plugin.transition("another-task", "executing", "released")  # (not this one's: nothing stops)
        await asyncio.sleep(0.05)
        assert not answering.done()
        plugin.transition("job-answer-3", "executing", "released")
        with pytest.raises(TaskReleased, match="Dask released task job-answer-3"):
            await asyncio.wait_for(answering, 5)

    asyncio.run(run())
    engine, m = plugin.engine, plugin.metrics
    assert engine.started == 4 and engine.cancelled == 4  # the 4 in flight stopped; the other 36 never began
    assert m.in_flight == 0 and m.requests == 0 and m.errors == 0 and m.prefill_outstanding == 0
    assert plugin._answering == {}


def test_a_buckets_answers_are_written_in_files_of_many_rows_each_every_row_once(tmp_path):
    """An answer task's rows come from many input partitions; each answer file holds one
    partition's, written once ``rows`` of them wait (or, after ``seconds``, all that wait), the
    rest at the end: every row once, sorted by position, counted as written."""
    from pipeline.data.answer_files import AnswerFiles, BucketCommits
    from pipeline.data.job_folder import LocalFolder
    from pipeline.results import RowResult

    files = AnswerFiles(LocalFolder(tmp_path))
    starts = (0, 100, 200)  # three partitions of 100 rows
    positions = [5, 150, 7, 250, 3, 120, 9, 1, 260, 130]
    written = []
    commits = BucketCommits(
        files, starts, "run-b000001", 0, rows=4, seconds=3600, on_written=lambda t: written.append(t.num_rows)
    )
    commits.add([RowResult(p, answer=f"a{p}") for p in positions[:5]])  # partition 0 has 3 waiting: none due
    assert written == []
    commits.add([RowResult(p, answer=f"a{p}") for p in positions[5:]])  # partition 0 reaches 5
    assert written == [5]
    commits.close()
    assert sorted(written) == [2, 3, 5]
    by_partition = {
        n: files.read_named("run-b000001").filter(
            (pc.field("position") >= n * 100) & (pc.field("position") < n * 100 + 100)
        )
        for n in range(3)
    }
    assert [len(files.answer_files(n)) for n in range(3)] == [1, 1, 1]
    for n, table in by_partition.items():
        expected = sorted(p for p in positions if n * 100 <= p < n * 100 + 100)
        assert table.column("position").to_pylist() == expected
        assert table.column("answer").to_pylist() == [f"a{p}" for p in expected]

    soon = BucketCommits(files, starts, "run-b000002", 0, rows=1000, seconds=0, on_written=lambda t: None)
    soon.add([RowResult(p) for p in (10, 110)])  # every partition's, at once
    assert [len(files.answer_files(n)) for n in range(3)] == [2, 2, 1]


def test_a_read_without_texts_splits_into_the_same_pieces_as_one_that_kept_them(tmp_path, tokenizer):
    """A file job's read keeps no text (``texts=False``: each row's position and digest, the
    documents, the errors); its split reads the partition again. The pieces are the ones a
    read that kept the texts gives: same rows, prefixes on the same rows, same suffixes; with
    rows that failed, rows answered by an earlier run, and a document split into chunks."""
    from pipeline.data.errors import JobError
    from pipeline.steps.prompt_table import PartitionTexts

    rng = np.random.default_rng(5)
    docs = [f"document {d} ünï " + "text " * (d + 1) for d in rng.integers(0, 7, 90)]
    docs[10:40] = ["one shared head"] * 30
    docs[3], docs[50] = None, "   "
    questions = [f"question {i} ✓" for i in range(90)]
    questions[7] = ""
    table = pa.table({"document": docs, "question": questions})
    source = _source(tmp_path, table, Columns(required=("document", "question")))
    task = DocumentQuestion(tokenizer)
    parts = plan_partitions(source.row_groups, 30)
    done = pa.array([0, 11, 60], pa.int64())  # answered by an earlier run
    kept = [(prompt_rows(source, task, p, done), None) for p in parts]
    lean = [(prompt_rows(source, task, p, done, texts=False), None) for p in parts]
    assert all(r.texts for r, _ in kept) and not any(r.texts for r, _ in lean)
    assert all(r.rows.column_names == ["position", "digest"] for r, _ in lean)
    for (a, _), (b, _) in zip(kept, lean):
        assert b.documents.equals(a.documents) and b.errors.equals(a.errors)
        assert b.rows.equals(a.rows.select(["position", "digest"]))
    placement = place_task(["cpu0", "cpu1"], {}, 8, 0, *(r.documents for r, _ in lean))
    assert placement.split  # (the shared head's rows are cut into chunks)
    for (a, fa), (b, fb), part in zip(kept, lean, parts):
        texts = PartitionTexts(source, task, part, b.rows.column("position").to_numpy())
        want, got = split_task((a, fa), placement), split_task((b, fb), placement, texts)
        assert got.keys() == want.keys()
        for shard in want:
            assert got[shard].equals(want[shard]), shard
    # a file that changed under the job is refused, not answered with other texts
    for changed in (
        {"document": [f"changed {d}" if d else d for d in docs], "question": questions},
        {"document": docs[:80], "question": questions[:80]},
    ):
        pq.write_table(pa.table(changed), tmp_path / "in.parquet", row_group_size=7)
        with pytest.raises(JobError, match="changed while the job ran"):
            for (b, fb), part in zip(lean, parts):
                split_task((b, fb), placement, PartitionTexts(source, task, part, b.rows.column("position").to_numpy()))


def rows_by_shard(placement) -> dict[str, int]:
    """Each shard's rows, over its buckets."""
    out: dict[str, int] = {}
    for b in placement.buckets:
        out[b.shard] = out.get(b.shard, 0) + b.rows
    return out
