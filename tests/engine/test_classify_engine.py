"""Classify and score on the real engine (issue 44): each row's label probabilities are the model's
own -- the same as computed without vLLM (transformers, float32; the engines may run bfloat16) --
on the right row, and a document's queries share its prefill."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.bench.score import pairs_of, reference_logprobs, score_of
from pipeline.jobs.job import run_job
from tasks import get_task_kind

REVIEWS = [
    "An absolute delight from start to finish; I loved every minute and would watch it again.",
    "Terrible. Boring, badly acted, and far too long; I walked out after an hour.",
    "The food was cold, the waiter was rude, and we waited forty minutes. Never again.",
    "Wonderful service and the best pasta I have had in years. Highly recommended!",
]
TEMPLATE = "Review: {text}\n\nIs this review positive or negative? Answer with one word."
LABELS = ["positive", "negative"]


def _reference(pipeline, config, rows: list[dict]) -> list[list[float]]:
    """Each row's label probabilities from the transformers reference, on the prompt the workers send."""
    task = get_task_kind(config, pipeline.tokenizer)

    def encode(text):
        return pipeline.tokenizer.encode(text, add_special_tokens=False)

    prompts = [encode(p.prefix) + encode(p.suffix) for p in map(task.split, rows)]
    label_ids = [encode(label)[0] for label in task.labels]
    out = []
    for logprobs in reference_logprobs(pipeline.model, prompts, label_ids):
        first = score_of(list(logprobs))
        out.append([first, 1 - first])
    return out


def test_scores_are_the_models_own_and_a_documents_queries_share_its_prefill(pipeline, tmp_path):
    rows = pairs_of(3, 4, seed=5)  # (3 documents x 4 queries, shuffled; ~700-token prompts)
    src = tmp_path / "pairs.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    run_job(pipeline, src, tmp_path / "scores.parquet", progress=False, task="score")
    out = pq.read_table(tmp_path / "scores.parquet").to_pylist()
    assert [r["id"] for r in out] == [r["id"] for r in rows]
    ref = _reference(pipeline, pipeline.config.for_job("score", None, None), rows)
    for row, want in zip(out, ref):
        assert row["error"] is None and 0 < row["score"] < 1
        assert row["score"] == pytest.approx(want[0], abs=0.05)
    # each document prefilled once on its shard: its other queries find it cached
    assert sum(r["cached_tokens"] for r in out) >= 0.5 * sum(r["prompt_tokens"] for r in out)


def test_classify_labels_and_probabilities_are_the_models_own(pipeline, tmp_path):
    src = tmp_path / "reviews.parquet"
    pq.write_table(pa.table({"id": [f"r{k}" for k in range(len(REVIEWS))], "text": REVIEWS}), src)
    prompt = {"template": TEMPLATE, "labels": LABELS}
    run_job(pipeline, src, tmp_path / "labels.parquet", progress=False, task="classify", prompt=prompt)
    out = pq.read_table(tmp_path / "labels.parquet").to_pylist()
    ref = _reference(pipeline, pipeline.config.for_job("classify", prompt, None), [{"text": t} for t in REVIEWS])
    for row, want in zip(out, ref):
        assert row["error"] is None and sum(row["label_probs"]) == pytest.approx(1)
        assert row["label_probs"] == pytest.approx(want, abs=0.05)
        if abs(want[0] - want[1]) > 0.1:  # (where the reference is clear, the same label)
            assert row["label"] == LABELS[want.index(max(want))]
