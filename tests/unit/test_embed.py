"""Task embed with the fake engine (plumbing: every row's embedding on its row, from Parquet,
OpenAI batch JSONL, a DataFrame and Python rows; bad rows are error rows; a cluster that cannot
embed is refused up front). The real model's embeddings: tests/engine/test_embed_engine.py."""

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import Pipeline, load_config
from pipeline.data.errors import JobError
from pipeline.jobs.job import run_job
from pipeline.worker.fake_engine import FakeEngine


@pytest.fixture(scope="module")
def fake_pipeline():
    config = load_config().replace(scheduler={"dashboard_address": None}, task="embed")
    with Pipeline(config, engine="fake") as p:
        yield p


def _expected(text: str, normalize=None) -> np.ndarray:
    """What the fake engine embeds ``text`` as (its tokens are the text's code points)."""
    import asyncio

    ids = FakeEngine().encode(text)
    return asyncio.run(FakeEngine().embed(ids, "x", normalize)).vector


TEXTS = ["alpha", "bravo charlie", "", "alpha", "delta " * 3, None, "echo"]


def test_each_rows_embedding_on_its_row_and_bad_rows_as_errors(fake_pipeline, tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(
        pa.table({"id": [f"r{k}" for k in range(len(TEXTS))], "document": TEXTS, "topic": list(range(len(TEXTS)))}), src
    )
    summary = run_job(fake_pipeline, src, tmp_path / "out.parquet", progress=False)
    out = pq.read_table(tmp_path / "out.parquet")
    assert out.column_names == ["topic", "id", "embedding", "error", "prompt_tokens", "shard", "latency_s"]
    assert out.schema.field("embedding").type == pa.list_(pa.float32(), FakeEngine.embedding_size)  # (fixed size)
    rows = out.to_pylist()
    assert [r["id"] for r in rows] == [f"r{k}" for k in range(len(TEXTS))] and summary.rows == len(TEXTS)
    for text, row in zip(TEXTS, rows):
        if not text:
            assert (
                row["embedding"] is None and row["error"] == f"input: document is {'null' if text is None else 'empty'}"
            )
            continue
        assert row["error"] is None and row["prompt_tokens"] == len(text)
        assert np.allclose(row["embedding"], _expected(text), atol=1e-6)
        assert abs(np.linalg.norm(row["embedding"]) - 1) < 1e-5  # normalised, as the model defines


def test_normalisation_can_be_turned_off_and_a_template_builds_the_text(fake_pipeline, tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": ["alpha", "bravo"]}), src)
    run_job(
        fake_pipeline,
        src,
        tmp_path / "out.parquet",
        progress=False,
        task="embed",
        prompt={"template": "query: {text}"},
        sampling={"normalize": False},
    )
    rows = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [r["id"] for r in rows] == [0, 1]
    for text, row in zip(["alpha", "bravo"], rows):
        assert np.allclose(row["embedding"], _expected(f"query: {text}", normalize=False), atol=1e-6)


def test_openai_batch_embedding_requests_in_and_openai_responses_out(fake_pipeline, tmp_path):
    lines = [
        {"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {"model": "m", "input": "alpha"}},
        {"custom_id": "b", "method": "POST", "url": "/v1/embeddings", "body": {"input": ["bravo"]}},
        {"custom_id": "c", "method": "POST", "url": "/v1/embeddings", "body": {"input": ["x", "y"]}},
        {"custom_id": "d", "method": "POST", "url": "/v1/embeddings", "body": {"inputs": "typo"}},
        {
            "custom_id": "e",
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"input": "z", "encoding_format": "base64"},
        },
    ]
    src = tmp_path / "batch.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    run_job(fake_pipeline, src, tmp_path / "out.jsonl", progress=False)
    out = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [o["custom_id"] for o in out] == ["a", "b", "c", "d", "e"]
    for o, text in zip(out[:2], ["alpha", "bravo"]):
        body = o["response"]["body"]
        assert o["error"] is None and o["response"]["status_code"] == 200
        assert body["object"] == "list" and body["usage"] == {"prompt_tokens": len(text), "total_tokens": len(text)}
        assert [d["object"] for d in body["data"]] == ["embedding"] and body["data"][0]["index"] == 0
        assert np.allclose(body["data"][0]["embedding"], _expected(text), atol=1e-6)
    assert out[2]["error"] == {"code": "input", "message": "input: body.input must be a string (one text per request)"}
    assert out[3]["error"]["message"] == "input: body.input is missing"
    assert "encoding_format 'base64' is not supported" in out[4]["error"]["message"]


def test_python_rows_and_dataframes_get_embeddings(fake_pipeline):
    results = fake_pipeline.run([{"id": "x", "document": "alpha"}, {"id": "y", "document": "bravo"}])
    assert [r.id for r in results] == ["x", "y"]
    assert np.allclose(results[1].embedding, _expected("bravo"), atol=1e-6) and results[1].answer is None
    df = pd.DataFrame({"document": ["alpha", "bravo", "charlie"]}, index=[10, 11, 12])
    out = fake_pipeline.map_dataframe(df).compute()
    assert list(out.columns) == ["embedding", "error", "prompt_tokens", "shard", "latency_s"]
    assert list(out.index) == [10, 11, 12]
    assert np.allclose(out.loc[12, "embedding"], _expected("charlie"), atol=1e-6)


def test_too_long_text_is_an_error_row_or_cut_when_asked(tmp_path):
    config = load_config().replace(scheduler={"dashboard_address": None}, task="embed", engine={"max_model_len": 8})
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"document": ["short", "a text of many tokens"]}), src)
    with Pipeline(config, engine="fake") as p:
        run_job(p, src, tmp_path / "out.parquet", progress=False)
        run_job(p, src, tmp_path / "cut.parquet", progress=False, truncate=True)
    rows = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert rows[0]["error"] is None
    assert rows[1]["error"] == (
        "input: prompt too long (21 tokens; the embedding model takes 8); shorten it, "
        "or ask for truncation (--truncate)"
    )
    cut = pq.read_table(tmp_path / "cut.parquet").to_pylist()
    assert cut[1]["error"] is None and cut[1]["prompt_tokens"] == 8
    assert np.allclose(cut[1]["embedding"], _expected("a text o"), atol=1e-6)


def test_a_job_the_engines_cannot_serve_is_refused_before_anything_runs(fake_pipeline, tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"document": ["d"], "question": ["q"]}), src)
    fake_pipeline.engine_tasks = frozenset({"embed"})  # (as an embedding model's engines report)
    try:
        with pytest.raises(JobError, match="an embedding model, which serves only task embed"):
            run_job(fake_pipeline, src, tmp_path / "out.parquet", progress=False, task="document_question")
        fake_pipeline.engine_tasks = frozenset({"generate"})
        with pytest.raises(JobError, match="task embed needs an embedding model"):
            run_job(fake_pipeline, src, tmp_path / "out2.parquet", progress=False)
    finally:
        fake_pipeline.engine_tasks = frozenset({"generate", "embed"})


def test_a_template_of_several_columns_embeds_its_whole_text(fake_pipeline, tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"title": ["Alpha", "Bravo"], "body": ["first body", "second"]}), src)
    run_job(
        fake_pipeline,
        src,
        tmp_path / "out.parquet",
        progress=False,
        task="embed",
        prompt={"template": "{title}: {body} (end)"},
    )
    rows = pq.read_table(tmp_path / "out.parquet").to_pylist()
    for title, body, row in zip(["Alpha", "Bravo"], ["first body", "second"], rows):
        text = f"{title}: {body} (end)"
        assert row["error"] is None and row["prompt_tokens"] == len(text)
        assert np.allclose(row["embedding"], _expected(text), atol=1e-6)
