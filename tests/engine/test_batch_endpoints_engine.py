"""OpenAI batch lines of each generating endpoint on the real engine, each output line read by
the ``openai`` package's own type. /v1/completions: a prompt cut into its shared document and
its own rest is the same tokens as the whole prompt (usage), answers greedily what the same
prompt alone answers, and the prompts after the first are served the document from the prefix
cache; the log-probabilities are OpenAI's legacy shape, consistent with the text.
/v1/responses and /v1/chat/completions: Response and ChatCompletion, a JSON schema's answer
matching it, an answer cut at its limit marked so. (Tools: tests/engine/test_chat_tools_engine.py.)"""

import json

import jsonschema
import pyarrow.parquet as pq
from openai.types import Completion
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from pipeline.jobs.job import run_job

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_completion_lines_on_the_real_engine(pipeline, tmp_path):
    documents = list(dict.fromkeys(pq.read_table(ROOT / "datasets/sample.parquet").column("document").to_pylist()))[:2]
    questions = ["What is this about?", "Who is named?", "When did it happen?", "Why does it matter?"]
    prompts = [[f"{d}\n\nQuestion: {q}\nAnswer:" for q in questions] for d in documents]
    lines = [
        {
            "custom_id": f"doc-{k}",
            "method": "POST",
            "url": "/v1/completions",
            "body": {"model": "any", "prompt": p, "max_tokens": 8, "temperature": 0, "logprobs": 2},
        }
        for k, p in enumerate(prompts)
    ]
    lines.append(
        {
            "custom_id": "alone",
            "method": "POST",
            "url": "/v1/completions",
            "body": {"prompt": prompts[0][1], "max_tokens": 8, "temperature": 0},
        }
    )
    src = tmp_path / "completions.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    run_job(pipeline, src, tmp_path / "out.jsonl", progress=False)
    out = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [o["custom_id"] for o in out] == ["doc-0", "doc-1", "alone"] and all(o["error"] is None for o in out)
    bodies = [Completion.model_validate(o["response"]["body"]) for o in out]

    def tokens(text):
        return len(pipeline.tokenizer.encode(text, add_special_tokens=False))

    for body, line in zip(bodies[:2], prompts):
        assert [c.index for c in body.choices] == [0, 1, 2, 3] and any(c.text.startswith(" ") for c in body.choices)
        assert body.usage.prompt_tokens == sum(tokens(p) for p in line)  # the cut pieces: the whole prompt's tokens
        document = tokens(line[0].split("\n\n")[0]) // pipeline.block_size * pipeline.block_size
        assert body.usage.prompt_tokens_details.cached_tokens >= 3 * document  # prefilled once
        for choice in body.choices:
            lp = choice.logprobs
            # the text as generated, its leading space kept (the end-of-text token has no text)
            assert "".join(lp.tokens).startswith(choice.text) and len(lp.token_logprobs) == len(lp.tokens)
            assert choice.finish_reason == "stop" or "".join(lp.tokens) == choice.text
            assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
            assert all(x <= 0 for x in lp.token_logprobs) and all(1 <= len(top) <= 3 for top in lp.top_logprobs)
            assert body.usage.completion_tokens >= len(lp.tokens)
    (alone,) = bodies[2].choices
    assert alone.text == bodies[0].choices[1].text and alone.logprobs is None  # greedy: the same prompt, alike


def test_responses_and_chat_lines_on_the_real_engine(pipeline, tmp_path):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    responses = [
        {
            "custom_id": "text",
            "method": "POST",
            "url": "/v1/responses",
            "body": {
                "input": "Name a large city in France.",
                "instructions": "Answer in one word.",
                "max_output_tokens": 48,
                "temperature": 0,
            },
        },
        {
            "custom_id": "json",
            "method": "POST",
            "url": "/v1/responses",
            "body": {
                "input": [
                    {"role": "user", "content": [{"type": "input_text", "text": "Give a city in Spain as JSON."}]}
                ],
                "text": {"format": {"type": "json_schema", "name": "city", "schema": schema}},
                "max_output_tokens": 32,
                "temperature": 0,
            },
        },
        {
            "custom_id": "cut",
            "method": "POST",
            "url": "/v1/responses",
            "body": {"input": "Tell a long story about a cat.", "max_output_tokens": 3},
        },
    ]
    chat = [
        {
            "custom_id": "chat",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "messages": [{"role": "user", "content": "Say hello."}],
                "max_tokens": 8,
                "n": 2,
                "temperature": 0.8,
                "logprobs": True,
                "top_logprobs": 2,
                "seed": 1,
            },
        }
    ]
    for name, lines in (("responses", responses), ("chat", chat)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        run_job(pipeline, tmp_path / f"{name}.jsonl", tmp_path / f"{name}-out.jsonl", progress=False)
    out = [json.loads(x) for x in (tmp_path / "responses-out.jsonl").read_text().splitlines()]
    assert all(o["error"] is None for o in out), [o["error"] for o in out]
    text, as_json, cut = (Response.model_validate(o["response"]["body"]) for o in out)
    assert text.output_text.strip() and text.usage.input_tokens > 0
    assert (text.status == "incomplete") == (text.usage.output_tokens == 48)  # (complete unless cut at its limit)
    assert as_json.status == "completed"
    jsonschema.validate(json.loads(as_json.output_text), schema)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    assert cut.usage.output_tokens == 3
    (line,) = [json.loads(x) for x in (tmp_path / "chat-out.jsonl").read_text().splitlines()]
    assert line["error"] is None, line["error"]
    completion = ChatCompletion.model_validate(line["response"]["body"])
    assert len(completion.choices) == 2 and all(c.logprobs.content for c in completion.choices)
    assert completion.usage.prompt_tokens_details.cached_tokens is not None
