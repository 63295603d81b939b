"""Task classify on a classification model (a ...ForSequenceClassification checkpoint), with the
fake engine (plumbing: its head's label probabilities on each row, the model's labels by default or
some of them renormalised, bad labels and jobs the model cannot serve refused up front). The real
model's probabilities: tests/engine/test_classifier_engine.py."""

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import Pipeline, load_config
from pipeline.client.tokenizer import load_tokenizer
from pipeline.config import ConfigError
from pipeline.data.errors import JobError
from pipeline.jobs.job import run_job
from pipeline.model import head_labels, packaged_task
from tasks import get_task_kind
from tasks.registry import unserved
from tasks.template import TemplateError

LABELS = ["negative", "neutral", "positive"]
TEXTS = ["positive positive, and negative", "negative", "neutral neutral neutral", "plain", None]


@pytest.fixture(scope="module")
def head_pipeline(classifier_model):
    config = load_config().replace(
        scheduler={"dashboard_address": None}, model={"path": classifier_model}, task="classify"
    )
    with Pipeline(config, engine="fake") as p:
        yield p


def _softmax(counts: list[int]) -> list[float]:
    weights = [math.exp(c - max(counts)) for c in counts]
    return [w / sum(weights) for w in weights]


def _rows(pipeline, tmp_path, name: str, **job) -> list[dict]:
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [f"r{k}" for k in range(len(TEXTS))], "text": TEXTS}), src)
    run_job(pipeline, src, tmp_path / name, progress=False, task="classify", **job)
    out = pq.read_table(tmp_path / name)
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
    return out.to_pylist()


def test_the_models_head_weighs_its_own_labels_on_each_row(head_pipeline, tmp_path):
    assert head_pipeline.engine_tasks == {"classify"}
    rows = _rows(head_pipeline, tmp_path, "out.parquet")  # (no template, no labels: the model's, on {text})
    assert [r["id"] for r in rows] == [f"r{k}" for k in range(len(TEXTS))]
    # (the fake head: softmax over how often the text names each label)
    for text, row in zip(TEXTS[:4], rows):
        want = _softmax([text.count(label) for label in LABELS])
        assert row["error"] is None and row["label_probs"] == pytest.approx(want)
        assert row["label"] == LABELS[want.index(max(want))] and row["prompt_tokens"] == len(text)
    assert [r["label"] for r in rows] == ["positive", "negative", "neutral", "negative", None]
    assert rows[4]["error"] == "input: text is null"


def test_some_of_the_models_labels_are_renormalised_in_the_order_given(head_pipeline, tmp_path):
    rows = _rows(
        head_pipeline,
        tmp_path,
        "some.parquet",
        prompt={"template": "{text} neutral", "labels": ["positive", "neutral"]},
    )
    for text, row in zip(TEXTS[:4], rows):
        counts = [(text + " neutral").count(label) for label in LABELS]
        full = _softmax(counts)
        want = [full[2] / (full[2] + full[1]), full[1] / (full[2] + full[1])]
        assert (
            row["label_probs"] == pytest.approx(want) and row["label"] == ["positive", "neutral"][want.index(max(want))]
        )


def test_labels_not_the_models_and_jobs_it_cannot_serve_are_refused(head_pipeline, tmp_path, classifier_model):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": ["t"], "document": ["d"], "question": ["q"]}), src)
    with pytest.raises(
        (TemplateError, JobError, ConfigError),
        match=r"the model's labels are \['negative', "
        r"'neutral', 'positive'\]; \['good'\] are not among them",
    ):
        run_job(
            head_pipeline,
            src,
            tmp_path / "bad.parquet",
            progress=False,
            task="classify",
            prompt={"template": "{text}", "labels": ["positive", "good"]},
        )
    with pytest.raises(
        JobError,
        match="a classification model, which serves only tasks classify and score "
        r"\(this job's task is document_question\)",
    ):
        run_job(head_pipeline, src, tmp_path / "gen.parquet", progress=False, task="document_question")
    with pytest.raises(JobError, match="task embed needs an embedding model.*a classification model"):
        run_job(head_pipeline, src, tmp_path / "emb.parquet", progress=False, task="embed")
    # what the command line checks before any engine starts
    config = load_config().replace(model={"path": classifier_model})
    assert packaged_task(config) == "classify" and packaged_task(load_config()) == "generate"
    assert unserved("classify", ("classify",), "m") is None and unserved("score", ("classify",), "m") is None
    assert "an embedding model, which serves only task embed (this job's task is classify)" in unserved(
        "classify", ("embed",), "m"
    )


def test_a_classify_task_needs_template_and_labels_unless_the_model_has_a_head(classifier_model, tmp_path):
    """Checked where the model is read (its head's labels), not when the config is validated: a
    config names a model that may not be there yet (a remote worker's path, one to prepare)."""
    head = load_config().replace(model={"path": classifier_model}, task="classify")
    assert head_labels(head) and get_task_kind(head, load_tokenizer(classifier_model), head_labels(head)).labels
    plain = load_config().replace(task="classify", model={"path": str(tmp_path / "not-there-yet")})
    assert head_labels(plain) is None
    with pytest.raises(TemplateError, match="task classify needs prompt.template"):
        get_task_kind(plain, load_tokenizer(classifier_model), head_labels(plain))
