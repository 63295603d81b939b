"""OpenAI batch /v1/score and /v1/rerank lines on the real engine (issue 44): a line's scores are
the same pairs' scores from a Parquet score job, each on its index, and a rerank line's
documents come highest score first."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.bench.score import pairs_of
from pipeline.jobs.job import run_job

# The same pair scored twice may differ by one step of its logits: bfloat16 logits near 20 move in
# steps of 0.125, ~0.03 of a probability near 0.5, and a prompt whose document was served from the
# prefix cache (the other job's order decides which) can land a step apart (seen: 0.4073 vs 0.3775)
STEP = 0.04


def test_a_score_lines_scores_are_a_parquet_score_jobs(pipeline, tmp_path):
    found = pairs_of(2, 2, seed=7)  # (2 documents x 2 queries each, ~700-token prompts)
    documents = sorted({r["document"] for r in found})
    queries = [r["query"] for r in found]
    rows = [{"id": k, "document": d, "query": q} for k, (q, d) in enumerate((q, d) for q in queries for d in documents)]
    src = tmp_path / "pairs.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    run_job(pipeline, src, tmp_path / "scores.parquet", progress=False, task="score")
    scored = pq.read_table(tmp_path / "scores.parquet").to_pylist()
    want = {(r["query"], r["document"]): s["score"] for r, s in zip(rows, scored)}
    tokens = {(r["query"], r["document"]): s["prompt_tokens"] for r, s in zip(rows, scored)}
    # a line per query, over every document (1:N); a rerank line
    lines = [
        {
            "custom_id": f"s{k}",
            "method": "POST",
            "url": "/v1/score",
            "body": {"model": "any", "text_1": q, "text_2": documents},
        }
        for k, q in enumerate(queries)
    ]
    lines.append(
        {
            "custom_id": "r",
            "method": "POST",
            "url": "/v1/rerank",
            "body": {"query": queries[0], "documents": documents, "top_n": 1},
        }
    )
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps(x) + "\n" for x in lines))
    run_job(pipeline, batch, tmp_path / "out.jsonl", progress=False)
    out = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [o["custom_id"] for o in out] == [x["custom_id"] for x in lines]
    for q, o in zip(queries, out):
        data = o["response"]["body"]["data"]
        assert o["error"] is None and [d["index"] for d in data] == list(range(len(documents)))
        for d, document in zip(data, documents):
            assert 0 < d["score"] < 1 and d["score"] == pytest.approx(want[q, document], abs=STEP)
        assert o["response"]["body"]["usage"]["prompt_tokens"] == sum(tokens[q, d] for d in documents)
    scored = out[0]["response"]["body"]["data"]
    best = max(range(len(documents)), key=lambda i: scored[i]["score"])
    (top,) = out[-1]["response"]["body"]["results"]
    assert top["index"] == best and top["document"]["text"] == documents[best]
    assert top["relevance_score"] == pytest.approx(scored[best]["score"], abs=STEP)
