"""OpenAI batch lines for /v1/score and /v1/rerank with the fake engine: each line fans out to a
row per (query, document) pair, answered as score rows, and gathers back into one output line
(every pair once, its score on its index; rerank sorted and cut at top_n); bad lines and failed
pairs are error lines; a rerun of an interrupted job answers only the pairs not committed.
The real model's scores: tests/engine/test_scoring_lines_engine.py."""

import json

import pyarrow as pa
import pytest

from pipeline import Pipeline, load_config, prepare_job
from pipeline.data.answer_files import ANSWER_SCHEMA, AnswerFiles
from pipeline.data.errors import JobError
from pipeline.data.scoring_lines import line_rows
from pipeline.steps.jsonl_input import fanned_rows

DOCS = ["y" * 30 + " yes", "n" * 30 + " no", "y" * 10 + "n" * 12, "yy nn"]


@pytest.fixture(scope="module")
def fake_pipeline():
    config = load_config().replace(scheduler={"dashboard_address": None})
    with Pipeline(config, engine="fake") as p:
        yield p


def request(custom_id, url, **body):
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def write(path, lines):
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def run(p, src, out, **config):
    job = prepare_job(src, out, config=p.config.replace(**config) if config else p.config, notify=lambda m: None)
    summary = job.run(p, progress=False)
    return summary, [json.loads(x) for x in out.read_text().splitlines()]


def scores(p, pairs):
    """The score task's scores of (query, document) pairs, as Python rows."""
    return [r.score for r in p.run([{"document": d, "query": q} for q, d in pairs], task="score")]


LINES = [
    request("s1", "/v1/score", model="m", text_1="is it yes?", text_2=DOCS),  # 1:N
    request("s2", "/v1/score", queries=["q yes", "q no"], documents=[DOCS[1], DOCS[0]]),  # N:N
    request("s3", "/v1/score", queries="one", items=DOCS[2]),  # 1:1
    request("r1", "/v1/rerank", query="which?", documents=DOCS),
    request("r2", "/v1/rerank", query="which?", documents=DOCS, top_n=2),
    request("s4", "/v1/score", data_1=["a", "b"], data_2=["x", "y", "z"]),
    "not json",
    request("s5", "/v1/score", text_1="q", text_2=["fine", ""]),
    request("r3", "/v1/rerank", query="q", documents=["a", {"content": []}]),
    request("r4", "/v1/rerank", query="q", documents=["a"], top_n=-1),
    request("s6", "/v1/score", text_1="q", text_2=["a"], truncate_prompt_tokens=5),
    request("s7", "/v2/score", text_1="q", text_2="yyy"),
]


def test_lines_fan_out_to_pairs_and_gather_back_in_vllms_shapes(fake_pipeline, tmp_path):
    src = write(tmp_path / "batch.jsonl", LINES)
    summary, out = run(fake_pipeline, src, tmp_path / "out.jsonl", jobs={"partition_bytes": 400})
    assert [o["custom_id"] for o in out] == ["s1", "s2", "s3", "r1", "r2", "s4", None, "s5", "r3", "r4", "s6", "s7"]
    assert [o["id"] for o in out] == [f"pipeline-{i}" for i in range(len(LINES))]
    # s1: one query, every document, each score on its document's index
    body = out[0]["response"]["body"]
    assert out[0]["error"] is None and out[0]["response"]["status_code"] == 200
    assert body["object"] == "list" and body["model"] and isinstance(body["created"], int)
    assert [d["index"] for d in body["data"]] == [0, 1, 2, 3] and {d["object"] for d in body["data"]} == {"score"}
    assert [d["score"] for d in body["data"]] == pytest.approx(scores(fake_pipeline, [("is it yes?", d) for d in DOCS]))
    assert body["data"][0]["score"] > 0.5 > body["data"][1]["score"]
    prompt = sum(
        r.prompt_tokens for r in fake_pipeline.run([{"document": d, "query": "is it yes?"} for d in DOCS], task="score")
    )
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] == prompt
    assert body["usage"]["completion_tokens"] == 0
    # s2: N:N pairs in order; s3: 1:1
    assert [d["score"] for d in out[1]["response"]["body"]["data"]] == pytest.approx(
        scores(fake_pipeline, [("q yes", DOCS[1]), ("q no", DOCS[0])])
    )
    assert [d["score"] for d in out[2]["response"]["body"]["data"]] == pytest.approx(
        scores(fake_pipeline, [("one", DOCS[2])])
    )
    # r1: every document, highest score first, each with its index and text; r2: the first two of those
    want = scores(fake_pipeline, [("which?", d) for d in DOCS])
    results = out[3]["response"]["body"]["results"]
    order = sorted(range(len(DOCS)), key=lambda i: -want[i])
    assert [r["index"] for r in results] == order
    assert [r["document"] for r in results] == [{"text": DOCS[i], "multi_modal": None} for i in order]
    assert [r["relevance_score"] for r in results] == pytest.approx([want[i] for i in order])
    assert set(out[3]["response"]["body"]) == {"id", "model", "usage", "results"}
    assert out[4]["response"]["body"]["results"] == results[:2]
    # errors: each its line's, with the pair that failed
    errors = [o["error"]["message"] if o["error"] else None for o in out]
    assert errors[5].startswith("input: Input lengths must be either 1:1, 1:N or N:N")
    assert errors[6].startswith("input: line is not valid JSON")
    assert errors[7] == "input: pair 1: document is empty"
    assert errors[8] == "input: body.documents[1]: expected str, got object"
    assert errors[9].startswith("input: body.top_n must be a whole number")
    assert errors[10].startswith("input: body.truncate_prompt_tokens is not supported")
    assert errors[11] is None and out[11]["response"]["body"]["data"][0]["index"] == 0  # (any url ending /score)
    for o in out[5:11]:
        assert o["response"] == {"status_code": 400, "request_id": o["response"]["request_id"], "body": None}
        assert o["error"]["code"] == "input"
    # every pair once: a row per pair, a row per bad line
    assert summary.rows == 4 + 2 + 1 + 4 + 4 + 1 + 1 + 2 + 1 + 1 + 1 + 1
    assert summary.errors == 6  # (rows: s5 has one pair that failed, one answered)


def test_a_line_of_another_endpoint_fails_the_file_either_way(fake_pipeline, tmp_path):
    chat = request("c", "/v1/chat/completions", messages=[{"role": "user", "content": "hi"}])
    score = request("s", "/v1/score", text_1="q", text_2=["a", "b"])
    with pytest.raises(
        JobError,
        match=r"line 2: url '/v1/score' is not this file's endpoint \(its first line's url\) "
        r"\(/v1/chat/completions\)",
    ):
        run(fake_pipeline, write(tmp_path / "chat.jsonl", [chat, score]), tmp_path / "chat-out.jsonl")
    with pytest.raises(
        JobError,
        match=r"line 2: url '/v1/chat/completions' is not this file's endpoint .* "
        r"\(/v1/score or /v1/rerank\)",
    ):
        run(fake_pipeline, write(tmp_path / "score.jsonl", [score, chat]), tmp_path / "score-out.jsonl")


def test_a_rerun_answers_only_the_pairs_not_committed_and_each_line_is_whole(fake_pipeline, tmp_path):
    """A killed run may have committed some of a line's pairs (answer files are per bucket, and
    a line's pairs go to different documents' buckets): the rerun answers the others, and the
    line gathers both."""
    lines = [request(f"r{k}", "/v1/rerank", query=f"q{k}", documents=DOCS) for k in range(3)]
    src = write(tmp_path / "batch.jsonl", lines)
    first = prepare_job(src, tmp_path / "out.jsonl", config=fake_pipeline.config, notify=lambda m: None)
    block = first.sink.partitions[0]
    assert len(fanned_rows(first.steps.source, block)) == 12
    kept = [block.start + i for i in (1, 2, 5)]  # two pairs of line 0, one of line 1
    AnswerFiles(first.sink.folder).write(
        0,
        "old-b000000-00000",
        pa.Table.from_arrays(
            [
                pa.array(kept, pa.int64())
                if f.name == "position"
                else pa.array([0.999] * 3, f.type)
                if f.name == "score"
                else pa.array([3] * 3, f.type)
                if f.name in ("prompt_tokens", "cached_tokens", "completion_tokens")
                else pa.nulls(3, f.type)
                for f in ANSWER_SCHEMA
            ],
            schema=ANSWER_SCHEMA,
        ),
    )
    notes = []
    again = prepare_job(src, tmp_path / "out.jsonl", config=fake_pipeline.config, notify=notes.append)
    assert notes == [f"resuming: 3 rows are already in {again.sink.dir}; answering the rest"]
    summary = again.run(fake_pipeline, progress=False)
    assert summary.resumed == 3 and summary.rows == 9
    out = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    for k, o in enumerate(out):
        want = scores(fake_pipeline, [(f"q{k}", d) for d in DOCS])
        if k == 0:
            want[1] = want[2] = 0.999
        if k == 1:
            want[1] = 0.999
        got = {r["index"]: r["relevance_score"] for r in o["response"]["body"]["results"]}
        assert sorted(got) == [0, 1, 2, 3] and [got[i] for i in range(4)] == pytest.approx(want)
    assert out[0]["response"]["body"]["results"][0]["index"] == 1  # (ties: in the documents' order)
    assert [o["id"] for o in out] == ["pipeline-0", "pipeline-1", "pipeline-2"]


def test_a_lines_rows_carry_what_its_output_needs():
    rows = line_rows(4, request("x", "/v1/rerank", query="q", documents="only", top_n=3), None)
    assert rows == [
        (
            {"document": "only", "query": "q"},
            None,
            {"line": 4, "custom_id": "x", "kind": "rerank", "index": 0, "top_n": 3, "document": "only"},
        )
    ]
    assert line_rows(0, None, "line is not valid JSON") == [
        (None, "line is not valid JSON", {"line": 0, "custom_id": None})
    ]
    adapters = frozenset({"legal"})
    assert (
        "names an adapter"
        in line_rows(0, request("x", "/v1/score", model="legal", text_1="q", text_2="d"), None, adapters)[0][1]
    )


def test_the_configs_score_task_answers_scoring_lines_if_its_template_reads_only_their_pairs(fake_pipeline):
    from pipeline.data.errors import JobError
    from pipeline.data.scoring_lines import scoring_task
    from tasks.classify import SCORE_TEMPLATE
    from tasks.registry import unserved

    config, tokenizer = fake_pipeline.config, fake_pipeline.tokenizer
    assert scoring_task(config, tokenizer).template == SCORE_TEMPLATE  # (a generation config: the defaults)
    own = config.for_job("score", {"template": "Q: {query}\nD: {document}", "labels": ["Yes", "No"]}, None)
    task = scoring_task(own, tokenizer)
    assert task.template == "Q: {query}\nD: {document}" and task.labels == ("Yes", "No")
    with pytest.raises(JobError, match="prompt.template reads title; a scoring request's pairs have only"):
        scoring_task(config.for_job("score", {"template": "{title}: {document} {query}"}, None), tokenizer)
    assert "serves only task embed (this job's task is score)" in unserved("score", ("embed",), "minilm")
