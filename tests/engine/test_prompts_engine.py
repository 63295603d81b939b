"""The user's own prompts and sampling on the real engine: templates, per-row settings,
JSON-schema and choice answers, the generate task, and OpenAI batch bodies."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
from jsonschema import validate

from pipeline.jobs.job import run_job

SAMPLE = "datasets/sample.parquet"
# the default task's per-row part ("Question: ..."), after another instruction and a system prompt
TEMPLATE = "Here is a document.\n\n{document}\n\nQuestion: {question}"


def _contains(expected, answer):
    return answer is not None and expected.lower() in answer.lower()


def _job(pipeline, tmp_path, name, src=SAMPLE, **settings):
    pipeline.reset_cache()  # each job starts with empty prefix caches: cached shares compare
    summary = run_job(pipeline, src, tmp_path / f"{name}.parquet", progress=False, **settings)
    return summary, pq.read_table(tmp_path / f"{name}.parquet").to_pylist()


def _ideal_cached_tokens(pipeline, task, rows) -> int:
    """Prompt tokens served from cache if every later question on a document hits all of its
    prefix's full KV blocks (perfect affinity)."""
    block = pipeline.block_size
    seen, total = set(), 0
    for r in rows:
        prefix = task.split(r).prefix
        if prefix in seen:
            total += len(pipeline.tokenizer.encode(prefix, add_special_tokens=False)) // block * block
        seen.add(prefix)
    return total


def test_template_job_answers_the_planted_facts_and_reuses_documents(pipeline, tmp_path):
    from tasks import get_task_kind

    table = pq.read_table(SAMPLE)
    first_docs = sorted(set(table.column("doc_id").to_pylist()))[:8]
    rows = [r for r in table.to_pylist() if r["doc_id"] in first_docs]  # 8 documents, 4 questions each
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    default, _ = _job(pipeline, tmp_path, "default", src=src)
    prompt = {"template": TEMPLATE, "system": "You answer questions about documents."}
    summary, out = _job(pipeline, tmp_path, "template", src=src, prompt=prompt)
    assert [o["id"] for o in out] == [r["id"] for r in rows] and summary.errors == 0
    right = sum(_contains(r["expected"], o["answer"]) for r, o in zip(rows, out))
    assert right >= 0.8 * len(rows), [(r["expected"], o["answer"]) for r, o in zip(rows, out)]
    # the document is in the template's prefix: its later questions hit the cache as the default's
    # do. (Raw cached shares differ with the prompts' lengths: both are compared to perfect
    # affinity, every full block of a document's prefix reused by its later questions. A task can
    # exceed it when the block that ends the prefix also matches: seen 1.05 for the default.)
    template_task = get_task_kind(pipeline.config.replace(prompt=prompt), pipeline.tokenizer)
    reuse = summary.cached_tokens / _ideal_cached_tokens(pipeline, template_task, rows)
    default_reuse = default.cached_tokens / _ideal_cached_tokens(pipeline, pipeline.task, rows)
    assert reuse >= 0.95 and default_reuse >= 0.95, (reuse, default_reuse)
    assert "document" not in out[0] and "expected" in out[0]  # prompt columns are not copied


def test_per_row_max_tokens_and_bad_values(pipeline, tmp_path):
    rows = pq.read_table(SAMPLE).slice(0, 6).to_pylist()
    limits = [1, 3, 8, None, 2, "many"]
    src = tmp_path / "in.parquet"
    pq.write_table(
        pa.Table.from_pylist([{**r, "max_tokens": str(m) if m is not None else None} for r, m in zip(rows, limits)]),
        src,
    )  # a string column: "many" is a bad value
    _, out = _job(pipeline, tmp_path, "bad", src=src)
    assert out[5]["error"] == "input: max_tokens must be an integer >= 1 (got 'many')"
    pq.write_table(pa.Table.from_pylist([{**r, "max_tokens": m} for r, m in zip(rows[:5], limits[:5])]), src)
    _, out = _job(pipeline, tmp_path, "limits", src=src)
    for o, m in zip(out, limits):
        assert o["error"] is None and o["completion_tokens"] <= (m or pipeline.config.sampling.max_tokens), (o, m)
    assert out[0]["completion_tokens"] == 1 and out[0]["finish_reason"] == "length"


SCHEMA = {
    "type": "object",
    "properties": {"person": {"type": "string"}, "answer": {"type": "string"}},
    "required": ["person", "answer"],
    "additionalProperties": False,
}


def test_json_schema_job_every_answer_parses_and_validates(pipeline, tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pq.read_table(SAMPLE).slice(0, 12), src)
    summary, out = _job(pipeline, tmp_path, "json", src=src, sampling={"json_schema": SCHEMA, "max_tokens": 64})
    assert summary.errors == 0, [o["error"] for o in out]
    for o in out:
        value = json.loads(o["answer_json"])
        validate(value, SCHEMA)
        assert json.loads(o["answer"]) == value  # the raw text is kept too


def test_choice_constrained_classification(pipeline, tmp_path):
    rows = pq.read_table(SAMPLE).slice(0, 8).to_pylist()
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist([{"id": r["id"], "text": r["question"]} for r in rows]), src)
    choices = ["colour", "sport", "pet", "instrument", "other"]
    summary, out = _job(
        pipeline,
        tmp_path,
        "choice",
        src=src,
        prompt={"template": "Which topic does this question ask about? {text}"},
        sampling={"choice": choices},
    )
    assert summary.errors == 0 and all(o["answer"] in choices for o in out), [o["answer"] for o in out]
    assert "answer_json" not in out[0]


def test_generate_task_with_a_shared_prefix(pipeline, tmp_path):
    doc = pq.read_table(SAMPLE).slice(0, 1).to_pylist()[0]
    rows = [
        {"id": f"r{i}", "prefix": f"Document:\n{doc['document']}\n\n", "prompt": q}
        for i, q in enumerate(
            [
                "What is the favourite colour of Jorkel Lodunpel?",
                "Who owns the bakery?",
                "What does the museum display?",
                "What is the pet of Jorfir Norhesros?",
            ]
        )
    ]
    rows.append({"id": "plain", "prefix": None, "prompt": "Say hello."})
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    summary, out = _job(pipeline, tmp_path, "generate", src=src, task="generate")
    assert summary.errors == 0 and all(o["answer"] for o in out)
    assert "silver" in out[0]["answer"].lower()
    shared = out[:4]
    assert len({o["shard"] for o in shared}) == 1  # one document: one shard
    assert sum(o["cached_tokens"] > 0 for o in shared) >= 3  # its later questions reuse it


def test_openai_batch_bodies_per_request_settings(pipeline, tmp_path):
    doc = pq.read_table(SAMPLE).slice(0, 1).to_pylist()[0]
    content = f"Document:\n{doc['document']}\n\nQuestion: {doc['question']}"

    def request(cid, **body):
        return {
            "custom_id": cid,
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "m", "messages": [{"role": "user", "content": content}], **body},
        }

    lines = [
        request("short", max_tokens=2),
        request("long", max_completion_tokens=24),
        request(
            "json",
            max_tokens=64,
            response_format={
                "type": "json_schema",
                "json_schema": {
                    "name": "a",
                    "schema": {"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]},
                },
            },
        ),
        request("bad", temperature=-1),
        request("tools", tools=[{"type": "function"}]),
    ]
    src = tmp_path / "batch.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    run_job(pipeline, src, tmp_path / "out.jsonl", progress=False)
    out = {x["custom_id"]: x for x in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())}
    short = out["short"]["response"]["body"]
    assert short["usage"]["completion_tokens"] <= 2 and short["choices"][0]["finish_reason"] == "length"
    assert out["long"]["response"]["body"]["usage"]["completion_tokens"] <= 24
    assert "colour" in json.loads(out["json"]["response"]["body"]["choices"][0]["message"]["content"])
    assert out["bad"]["error"] == {"code": "input", "message": "input: temperature must be a number >= 0 (got -1)"}
    assert out["tools"]["error"]["message"] == "input: body.tools[0].function is missing"
