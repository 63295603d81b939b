"""vLLM's own ``run-batch`` test inputs (tests/entrypoints/openai/test_run_batch.py in vLLM, its
chat, invalid, embedding, score, rerank and tool-calling files, rewritten here) through ``run``'s
job with the fake engine: every file vLLM answers is answered, a line per request, each output line
valid under vLLM's own ``BatchRequestOutput``; the file vLLM refuses (a line without custom_id) is
refused. The one difference, kept on purpose: a custom_id used twice is refused, as OpenAI refuses
it (vLLM's rerank file has one)."""

import json
import subprocess
import sys

import pytest
from openai.types.chat import ChatCompletion

from pipeline import Pipeline, load_config, prepare_job
from pipeline.data.errors import JobError

CHAT = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hello world!"}]
DOCS = ["The capital of Brazil is Brasilia.", "The capital of France is Paris."]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "The weather in a place",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}


def request(custom_id, url, **body):
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": {"model": "tiny", **body}}


FILES = {
    "chat": [
        request("request-1", "/v1/chat/completions", messages=CHAT, max_tokens=1000),
        request("request-2", "/v1/chat/completions", messages=CHAT, max_tokens=1000),
        request("request-3", "/v1/chat/completions", messages=CHAT, max_tokens=1000, model="NonExistModel"),
        request("request-4", "/bad_url", messages=CHAT, max_tokens=1000),
        request("request-5", "/v1/chat/completions", messages=CHAT, max_tokens=1000, stream="True"),
    ],
    "embeddings": [
        request(f"request-{i}", "/v1/embeddings", input=text)
        for i, text in enumerate(["You are a helpful assistant.", "You are an unhelpful assistant.", "Hello world!"], 1)
    ],
    "score": [
        request("request-1", "/score", queries="What is the capital of France?", documents=DOCS),
        request("request-2", "/v1/score", queries="What is the capital of France?", documents=DOCS),
    ],
    "rerank": [
        request("request-1", "/rerank", query="What is the capital of France?", documents=DOCS),
        request("request-2", "/v1/rerank", query="What is the capital of France?", documents=DOCS),
        request("request-3", "/v2/rerank", query="What is the capital of France?", documents=DOCS),
    ],
    "tools": [
        request(
            "request-1",
            "/v1/chat/completions",
            messages=[{"role": "user", "content": "Weather in SF?"}],
            tools=[WEATHER],
            tool_choice="required",
            max_tokens=1000,
        )
    ],
}


@pytest.fixture(scope="module")
def fake_pipeline():
    with Pipeline(load_config().replace(scheduler={"dashboard_address": None}), engine="fake") as p:
        yield p


def test_vllms_run_batch_inputs_are_answered_line_for_line(fake_pipeline, tmp_path):
    out = {}
    for name, lines in FILES.items():
        src = tmp_path / f"{name}.jsonl"
        src.write_text("\n".join(json.dumps(x) for x in lines))
        prepare_job(src, tmp_path / f"{name}-out.jsonl", config=fake_pipeline.config, notify=lambda m: None).run(
            fake_pipeline, progress=False
        )
        out[name] = [json.loads(x) for x in (tmp_path / f"{name}-out.jsonl").read_text().splitlines()]
        assert [o["custom_id"] for o in out[name]] == [x["custom_id"] for x in lines]
    errors = {o["custom_id"]: o["error"] for o in out["chat"] if o["error"]}
    assert set(errors) == {"request-4", "request-5"}
    assert errors["request-4"]["message"].startswith("input: url must be /v1/chat/completions (got '/bad_url')")
    assert errors["request-5"]["message"] == "input: body.stream: expected bool or null, got str"
    assert all(o["error"] is None for name in ("embeddings", "score", "rerank") for o in out[name])
    check = (
        "import json, sys\n"
        "from vllm.entrypoints.launchers.run_batch import BatchRequestOutput\n"
        "lines = json.load(sys.stdin)\n"
        "for line in lines:\n"
        "    BatchRequestOutput.model_validate(line)\n"
        "print('valid', len(lines))\n"
    )
    every = [o for lines in out.values() for o in lines]
    done = subprocess.run(
        [sys.executable, "-c", check], input=json.dumps(every), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == f"valid {len(every)}", done.stderr[-2000:]


def test_the_file_vllm_refuses_is_refused(tmp_path):
    lines = [
        {**request("x", "/v1/chat/completions", messages=CHAT)},
        request("request-2", "/v1/chat/completions", messages=CHAT),
    ]
    lines[0]["invalid_field"] = lines[0].pop("custom_id")
    src = tmp_path / "invalid.jsonl"
    src.write_text("\n".join(json.dumps(x) for x in lines))
    with pytest.raises(JobError, match="line 1: custom_id is missing"):
        prepare_job(src, tmp_path / "out.jsonl", config=load_config(), notify=lambda m: None)
    twice = tmp_path / "twice.jsonl"
    twice.write_text(
        "\n".join(
            json.dumps(request("request-2", url, query="q", documents=DOCS)) for url in ("/v1/rerank", "/v2/rerank")
        )
    )
    with pytest.raises(JobError, match=r"'request-2' \(2 times\)"):
        prepare_job(twice, tmp_path / "out2.jsonl", config=load_config(), notify=lambda m: None)


def test_a_tool_choice_auto_line_takes_the_jobs_tool_call_parser_through_the_cluster(fake_pipeline, tmp_path):
    """The parser is the job's (``engine.tool_call_parser`` of the config the job runs with): set,
    the line is answered (the fake engine's empty answer calls no tool: a text answer); not set,
    it is an error line naming the key."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions"}
    line["body"] = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": tools}
    src = tmp_path / "auto.jsonl"
    src.write_text(json.dumps(line) + "\n")
    out = {}
    for parser in ("hermes", None):
        config = fake_pipeline.config.replace(engine={"tool_call_parser": parser})
        prepare_job(src, tmp_path / f"{parser}.jsonl", config=config, notify=lambda m: None).run(
            fake_pipeline, progress=False
        )
        (out[parser],) = [json.loads(x) for x in (tmp_path / f"{parser}.jsonl").read_text().splitlines()]
    (choice,) = ChatCompletion.model_validate(out["hermes"]["response"]["body"]).choices
    assert out["hermes"]["error"] is None and choice.message.content == "" and choice.message.tool_calls is None
    assert "engine.tool_call_parser" in out[None]["error"]["message"]
