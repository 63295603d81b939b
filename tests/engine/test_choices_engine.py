"""Log-probabilities and several answers per row on the real engine (issue 44): the greedy
answer's tokens carry their log-probabilities, the likeliest first, and the answer is the same
as without them; ``n`` answers per row come back as ``choices``, the prompt counted once, from
Parquet, OpenAI batch JSONL and ``Pipeline.run`` alike."""

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.bench.workloads import document_questions
from pipeline.jobs.job import run_job
from tasks.document_question import INSTRUCTION


def _rows(seed: int):
    return document_questions(2, 2, seed=seed)


def test_log_probabilities_of_greedy_answers(pipeline, tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(_rows(41)), src)
    run_job(pipeline, src, tmp_path / "plain.parquet", progress=False)
    run_job(pipeline, src, tmp_path / "kept.parquet", progress=False, sampling={"logprobs": True, "top_logprobs": 3})
    plain = pq.read_table(tmp_path / "plain.parquet")
    kept = pq.read_table(tmp_path / "kept.parquet").to_pylist()
    assert "logprobs" not in plain.column_names and "choices" not in plain.column_names
    for before, row in zip(plain.to_pylist(), kept):
        assert row["error"] is None and row["answer"] == before["answer"]  # (asking for them changes nothing)
        tokens = row["logprobs"]
        assert len(tokens) == row["completion_tokens"] > 0
        # (an answer that ended has the end-of-turn token last, counted as vLLM counts it)
        text = tokens[:-1] if row["finish_reason"] == "stop" else tokens
        assert "".join(t["token"] for t in text).strip() == row["answer"]
        for t in tokens:
            top = t["top_logprobs"]
            assert len(top) == 3 and t["logprob"] <= 0
            assert [x["logprob"] for x in top] == sorted((x["logprob"] for x in top), reverse=True)
            # greedy: the token chosen is the likeliest
            assert top[0]["token"] == t["token"] and math.isclose(top[0]["logprob"], t["logprob"], abs_tol=1e-6)

    # the same from Python, asked for by a row of its own
    rows = [{**r, "logprobs": k == 1} for k, r in enumerate(_rows(41))]
    results = pipeline.run(rows)
    assert results[0].logprobs is None and results[0].answer == kept[0]["answer"]
    assert [t["token"] for t in results[1].logprobs] == [t["token"] for t in kept[1]["logprobs"]]


def test_several_answers_per_request_from_an_openai_batch(pipeline, tmp_path):
    rows = _rows(42)
    lines = []
    for k, r in enumerate(rows):
        content = f"{INSTRUCTION}\n\nDocument:\n{r['document']}\n\nQuestion: {r['question']}"
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": 12, "temperature": 1.0, "seed": k}
        lines.append(
            {
                "custom_id": f"q{k}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {**body, "n": 4, "logprobs": True, "top_logprobs": 2} if k % 2 == 0 else body,
            }
        )
    src = tmp_path / "batch.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    run_job(pipeline, src, tmp_path / "out.jsonl", progress=False)
    out = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [o["custom_id"] for o in out] == ["q0", "q1", "q2", "q3"] and all(o["error"] is None for o in out)
    single = out[1]["response"]["body"]
    assert len(single["choices"]) == 1 and single["choices"][0]["logprobs"] is None
    for o in (out[0], out[2]):
        body = o["response"]["body"]
        choices = body["choices"]
        assert [c["index"] for c in choices] == [0, 1, 2, 3]
        answers = [c["message"]["content"] for c in choices]
        assert all(answers) and len(set(answers)) > 1  # (sampled: not one answer four times)
        tokens = [len(c["logprobs"]["content"]) for c in choices]
        assert body["usage"]["completion_tokens"] == sum(tokens)
        for c in choices:
            for t in c["logprobs"]["content"]:
                assert len(t["top_logprobs"]) == 2 and t["bytes"] == list(t["token"].encode())
        # the prompt counted once, as for a single answer of the same length
        assert body["usage"]["prompt_tokens"] < 2 * single["usage"]["prompt_tokens"]
