"""`python -m pipeline serve` with `/v1/score` and `/v1/rerank` batches (fake engine, the official
`openai` package): each equals `python -m pipeline run` on the same file, its request_counts
count lines (requests), not pairs; a file with lines for the other scoring endpoint fails
validation; a cancelled scoring batch keeps whole lines only, every line once across its output
and error files; an embedding-model cluster refuses scoring batches with OpenAI's 400."""

import json
from types import SimpleNamespace

import pytest

from pipeline.service.errors import ApiError
from pipeline.service.runner import Runner, _pairs_as_lines
from pipeline.service.store import Store
from tests.unit.test_service import cluster, lines, over, pipeline_run, service, wait_for, without_created  # noqa: F401

DOCS = ["y" * 30 + " yes", "n" * 30 + " no", "y" * 10 + "n" * 12, "yy nn", "maybe so"]


def request(custom_id, url, **body):
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def score_file(path, n: int, bad: dict[int, str] | None = None, own_documents: bool = False):
    """``n`` /v1/score lines of 1 query and 3 to 5 documents each (``own_documents``: each
    line's own, else shared by the lines); ``bad``: lines as written."""
    with open(path, "w") as f:
        for i in range(n):
            documents = [f"line {i} document {j}: {d}" for j, d in enumerate(DOCS)] if own_documents else DOCS
            f.write(
                (bad or {}).get(i)
                or request(f"req-{i}", "/v1/score", model="m", queries=f"is {i} yes?", documents=documents[: 3 + i % 3])
            )
            f.write("\n")
    return path


def rerank_file(path, n: int):
    with open(path, "w") as f:
        for i in range(n):
            f.write(request(f"req-{i}", "/v1/rerank", query=f"which {i}?", documents=DOCS[i % 2 :], top_n=i % 4) + "\n")
    return path


def run_batch(client, src, endpoint):
    uploaded = client.files.create(file=src.open("rb"), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=endpoint, completion_window="24h")
    seen: list = []
    return wait_for(client, batch.id, over, seen=seen), seen


def test_score_and_rerank_batches_equal_pipeline_run(service, cluster, tmp_path):
    client = service.client()
    bad = {4: "not json", 9: request("req-9", "/v1/score", queries="q", documents=[])}
    for src, endpoint, failed in (
        (score_file(tmp_path / "score.jsonl", 40, bad), "/v1/score", 2),
        (rerank_file(tmp_path / "rerank.jsonl", 30), "/v1/rerank", 0),
    ):
        done, seen = run_batch(client, src, endpoint)
        n = len(src.read_text().splitlines())
        assert done.status == "completed" and done.endpoint == endpoint, done
        # request_counts count lines (requests), not pairs, while it runs too
        assert all(
            b.request_counts.total == n and b.request_counts.completed + b.request_counts.failed <= n for b in seen
        ), [b.request_counts for b in seen]
        assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (
            n,
            n - failed,
            failed,
        )
        expected = pipeline_run(cluster, src, tmp_path / f"run-{endpoint.rsplit('/', 1)[1]}.jsonl")
        output = lines(client.files.content(done.output_file_id).text)
        assert [without_created(o) for o in output] == [without_created(e) for e in expected if e["error"] is None]
        if failed:
            errors = lines(client.files.content(done.error_file_id).text)
            assert (
                [(e["id"], e["custom_id"]) for e in errors]
                == [(e["id"], e["custom_id"]) for e in expected if e["error"] is not None]
                == [("pipeline-4", None), ("pipeline-9", "req-9")]
            )
            assert errors[1]["response"]["status_code"] == 400
        else:
            assert done.error_file_id is None
        body = output[0]["response"]["body"]
        assert ("data" in body) if endpoint == "/v1/score" else ("results" in body)


def test_a_scoring_file_with_lines_for_the_other_endpoint_fails_validation(service, tmp_path):
    client = service.client()
    src = score_file(tmp_path / "mixed.jsonl", 5, {3: request("r", "/v1/rerank", query="q", documents=["a"])})
    done, _ = run_batch(client, src, "/v1/score")
    assert done.status == "failed" and [(d.code, d.line) for d in done.errors.data] == [("mismatched_endpoint", 4)]
    done, _ = run_batch(client, src, "/v1/rerank")
    assert done.status == "failed" and [(d.code, d.line) for d in done.errors.data] == [("mismatched_endpoint", 1)]


def test_a_cancelled_scoring_batch_keeps_whole_lines_only(service, tmp_path):
    client = service.client()
    n = 800
    src = score_file(tmp_path / "big-score.jsonl", n, own_documents=True)  # (lines end one after another)
    uploaded = client.files.create(file=src.open("rb"), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/score", completion_window="24h")
    wait_for(client, batch.id, lambda b: b.request_counts.completed >= 80 or over(b))
    client.batches.cancel(batch.id)
    cancelled = wait_for(client, batch.id, over, timeout_s=30)
    assert cancelled.status == "cancelled", cancelled
    counts = cancelled.request_counts
    assert counts.total == n and 0 < counts.completed < n and counts.completed + counts.failed == n, counts
    output = lines(client.files.content(cancelled.output_file_id).text)
    errors = lines(client.files.content(cancelled.error_file_id).text)
    assert len(output) == counts.completed and len(errors) == counts.failed
    for line in output:  # whole lines: every pair of the line, numbered as a whole run numbers it
        i = int(line["custom_id"].removeprefix("req-"))
        assert line["id"] == f"pipeline-{i}" and line["error"] is None
        assert [d["index"] for d in line["response"]["body"]["data"]] == list(range(3 + i % 3))
    for line in errors:
        assert line["id"] == "pipeline-" + line["custom_id"].removeprefix("req-") and line["response"] is None
        assert line["error"] == {
            "code": "batch_cancelled",
            "message": "This request could not be executed before the batch was cancelled.",
        }
    ids = [line["custom_id"] for line in output + errors]
    assert sorted(ids) == sorted(f"req-{i}" for i in range(n))  # every line exactly once


def test_an_embedding_model_cluster_refuses_scoring_batches(tmp_path):
    runner = Runner(
        SimpleNamespace(engine_tasks=frozenset({"embed"}), model="minilm"), Store(tmp_path / "store", 1 << 20, 100)
    )
    for endpoint in ("/v1/score", "/v1/rerank", "/v1/chat/completions"):
        with pytest.raises(ApiError) as refused:
            runner.create("file-x", endpoint, "24h", None)
        assert refused.value.status == 400 and refused.value.code == "unsupported_endpoint"
        assert refused.value.param == "endpoint" and "minilm" in refused.value.message


def test_pairs_as_lines():
    assert _pairs_as_lines(5, 0, 10, None) == (None, 0)
    assert _pairs_as_lines(0, 0, 10, 40) == (0, 0)
    assert _pairs_as_lines(39, 2, 10, 40) == (9, 2)
    assert _pairs_as_lines(40, 12, 10, 40) == (10, 10)
