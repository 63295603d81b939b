"""Tasks classify and score with the fake engine (plumbing: each row's labels weighed on its row, from
Parquet, a DataFrame and Python rows; bad rows are error rows; bad labels and a classify job without
its template or labels are refused up front). The real model's probabilities:
tests/engine/test_classify_engine.py."""

import asyncio
import math

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import Pipeline, load_config
from pipeline.config import ConfigError
from pipeline.jobs.job import run_job
from pipeline.worker.fake_engine import FakeEngine
from tasks import get_task_kind
from tasks.classify import SCORE_TEMPLATE, label_problem
from tasks.template import TemplateError

TEMPLATE = "Review: {text}\n\nIs this review positive or negative?"
LABELS = ["positive", "negative"]


@pytest.fixture(scope="module")
def fake_pipeline():
    config = load_config().replace(scheduler={"dashboard_address": None})
    with Pipeline(config, engine="fake") as p:
        yield p


def _probs(pipeline, config, row: dict) -> list[float]:
    """The fake engine's label probabilities for ``row``'s prompt (its tokens are the prompt's code points)."""
    parts = get_task_kind(config, pipeline.tokenizer).split(row)
    engine = FakeEngine()
    ids = engine.encode(parts.prefix + parts.suffix)
    labels = config.prompt.labels or ["yes", "no"]
    out = asyncio.run(engine.label_logprobs(ids, [engine.encode(label)[0] for label in labels], "x"))
    weights = [math.exp(lp) for lp in out.logprobs]
    return [w / sum(weights) for w in weights]


def test_classify_each_rows_label_and_probabilities_on_its_row(fake_pipeline, tmp_path):
    # (the fake engine weighs a label by how often its first character is in the prompt)
    texts = ["p" * 40 + " good", "n" * 40 + " bad", None, "p" * 40 + " good", "", "n" * 40]
    src = tmp_path / "in.parquet"
    pq.write_table(
        pa.table(
            {
                "id": [f"r{k}" for k in range(len(texts))],
                "text": texts,
                "label": [f"truth{k}" for k in range(len(texts))],
            }
        ),
        src,
    )
    summary = run_job(
        fake_pipeline,
        src,
        tmp_path / "out.parquet",
        progress=False,
        task="classify",
        prompt={"template": TEMPLATE, "labels": LABELS},
    )
    out = pq.read_table(tmp_path / "out.parquet")
    # (the input's own label column is the job's label: not copied, and said so)
    assert out.column_names == [
        "id",
        "label",
        "label_probs",
        "error",
        "prompt_tokens",
        "cached_tokens",
        "shard",
        "latency_s",
    ]
    rows = out.to_pylist()
    assert [r["id"] for r in rows] == [f"r{k}" for k in range(len(texts))] and summary.rows == len(texts)
    config = fake_pipeline.config.for_job("classify", {"template": TEMPLATE, "labels": LABELS}, None)
    for text, row in zip(texts, rows):
        if not text:
            assert row["label"] is None and row["error"] == f"input: text is {'null' if text is None else 'empty'}"
            continue
        want = _probs(fake_pipeline, config, {"text": text})
        assert row["error"] is None and row["label_probs"] == pytest.approx(want)
        assert row["label"] == LABELS[want.index(max(want))]
    assert [r["label"] for r in rows] == ["positive", "negative", None, "positive", None, "negative"]


def test_a_generation_job_keeps_an_input_column_named_label(fake_pipeline, tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"document": ["d"], "question": ["q"], "label": ["gold"]}), src)
    run_job(fake_pipeline, src, tmp_path / "out.parquet", progress=False)
    row = pq.read_table(tmp_path / "out.parquet").to_pylist()[0]
    assert row["label"] == "gold" and "score" not in row and row["answer"] == ""


def test_score_pairs_from_a_dataframe_and_python_rows(fake_pipeline):
    rows = [
        {"document": "y" * 40, "query": "q1"},
        {"document": "n" * 40, "query": "q2"},
        {"document": "y" * 40, "query": "q3"},
        {"document": "d", "query": None},
    ]
    config = fake_pipeline.config.for_job("score", None, None)
    df = fake_pipeline.map_dataframe(pd.DataFrame(rows), task="score").compute()
    assert list(df.columns) == ["score", "error", "prompt_tokens", "cached_tokens", "shard", "latency_s"]
    results = fake_pipeline.run(rows, task="score")
    for row, frame_score, result in zip(rows, df["score"], results):
        if row["query"] is None:
            assert result.error == "input: query is null" and pd.isna(frame_score)
            continue
        want = _probs(fake_pipeline, config, row)[0]
        assert result.error is None and result.score == pytest.approx(want) and frame_score == pytest.approx(want)
    assert results[0].score > 0.5 > results[1].score


def test_labels_must_differ_in_their_first_token_and_classify_needs_template_and_labels(fake_pipeline, tmp_path):
    tokenizer = fake_pipeline.tokenizer

    def encode(text):
        return tokenizer.encode(text, add_special_tokens=False)

    assert label_problem(["positive", "negative"], encode) is None
    assert "begin with the same token" in label_problem(["yes", "yes please"], encode)
    assert label_problem(["yes"], encode) == "give at least two labels"
    assert "is not text" in label_problem(["yes", " "], encode)
    with pytest.raises(TemplateError, match="begin with the same token"):
        get_task_kind(fake_pipeline.config.for_job("score", {"labels": ["yes", "yes please"]}, None), tokenizer)
    with pytest.raises(TemplateError, match="task classify needs prompt.template"):
        get_task_kind(fake_pipeline.config.for_job("classify", {"labels": LABELS}, None), tokenizer)
    with pytest.raises(ConfigError, match="prompt.labels is only used by tasks classify and score"):
        fake_pipeline.config.for_job("document_question", {"labels": LABELS}, None)
    assert get_task_kind(fake_pipeline.config.for_job("score", None, None), tokenizer).template == SCORE_TEMPLATE


def test_cli_refuses_bad_labels_before_any_engine_starts(tmp_path):
    import subprocess
    import sys

    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": ["a"]}), src)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "run",
            str(src),
            str(tmp_path / "out.parquet"),
            "--engine",
            "fake",
            "--task",
            "classify",
            "--template",
            "{text}",
            "--label",
            "yes",
            "--label",
            "yes please",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "begin with the same token" in out.stderr, out.stderr
    assert not (tmp_path / "out.parquet").exists()
