"""Task classify on a classification model on the real engine (issue 44 item 2): a
BertForSequenceClassification built from all-MiniLM-L6-v2 with a seeded 3-label head (the
``classifier_model`` fixture, tests/conftest.py) on vLLM's pooling engine. Each row's label
probabilities are the model's own head's -- softmax of its logits, computed without vLLM
(transformers, float32) -- and its label the likeliest; a generation job is refused."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import Pipeline, load_config
from pipeline.bench.workloads import document_questions
from pipeline.data.errors import JobError
from pipeline.jobs.job import run_job

pytestmark = pytest.mark.own_cluster

LABELS = ["negative", "neutral", "positive"]


def _reference(path: str, texts: list[str]) -> list[list[float]]:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        return [model(**tokenizer(t, return_tensors="pt")).logits.softmax(-1)[0].tolist() for t in texts]


def test_label_probabilities_are_the_models_heads(classifier_model, tmp_path):
    config = load_config().replace(
        scheduler={"dashboard_address": None}, model={"path": classifier_model}, task="classify"
    )
    docs = [r["document"] for r in document_questions(12, 1, seed=44)]
    texts = [d[: 30 + 25 * k] for k, d in enumerate(docs)]
    texts += ["I loved it.", "Terrible film; I walked out.", "It was fine, I guess.", "The best pasta in years!"]
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [f"t{k}" for k in range(len(texts))], "text": texts}), src)
    with Pipeline(config) as p:
        assert p.engine_tasks == {"classify"}
        run_job(p, src, tmp_path / "out.parquet", progress=False)
        with pytest.raises(JobError, match="a classification model, which serves only tasks classify and score"):
            run_job(
                p,
                src,
                tmp_path / "gen.parquet",
                progress=False,
                task="template",
                prompt={"template": "Summarize: {text}"},
            )
    rows = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [r["id"] for r in rows] == [f"t{k}" for k in range(len(texts))]
    ref = _reference(classifier_model, texts)
    worst = 0.0
    for row, want in zip(rows, ref):
        assert row["error"] is None and sum(row["label_probs"]) == pytest.approx(1, abs=1e-4)
        worst = max(worst, max(abs(a - b) for a, b in zip(row["label_probs"], want)))
        assert row["label"] == LABELS[row["label_probs"].index(max(row["label_probs"]))]
        if sorted(want)[-1] - sorted(want)[-2] > 0.02:  # (where the reference is clear, its label)
            assert row["label"] == LABELS[want.index(max(want))]
    print(f"largest difference from the reference: {worst:.5f}; labels {[r['label'] for r in rows]}")
    assert worst <= 0.01
    assert len({r["label"] for r in rows}) >= 2  # (the head tells the rows apart)
