"""Tools in chat lines on the real engine: every "required" and named-function answer is a tool
call whose arguments parse as JSON valid against its tool's schema, in OpenAI's ChatCompletion
with ``tool_calls`` and ``finish_reason`` "tool_calls"; "none" answers as text."""

import json

import jsonschema
from openai.types.chat import ChatCompletion

from pipeline.jobs.job import prepare_job, run_job

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
CLOCK = {
    "type": "object",
    "properties": {"zone": {"type": "string"}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "weather", "description": "Today's weather in a city", "parameters": WEATHER},
    },
    {"type": "function", "function": {"name": "clock", "description": "The time in a time zone", "parameters": CLOCK}},
]
SCHEMAS = {"weather": WEATHER, "clock": CLOCK}


def test_tool_calls_on_the_real_engine(pipeline, tmp_path):
    questions = [
        "What is the weather in Paris?",
        "Is it raining in Oslo?",
        "What time is it in Tokyo?",
        "Weather in Lima, in Fahrenheit?",
        "What time is it in UTC?",
        "How warm is Cairo?",
    ]
    choices = ["required"] * 6 + [{"type": "function", "function": {"name": "weather"}}] * 3 + ["none"]
    lines = [
        {
            "custom_id": f"t{k}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "messages": [{"role": "user", "content": questions[k % 6]}],
                "tools": TOOLS,
                "tool_choice": choice,
                "max_tokens": 96,
                "temperature": 0,
            },
        }
        for k, choice in enumerate(choices)
    ]
    src = tmp_path / "tools.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    run_job(pipeline, src, tmp_path / "out.jsonl", progress=False)
    out = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [o["custom_id"] for o in out] == [x["custom_id"] for x in lines]
    assert all(o["error"] is None for o in out), [o["error"] for o in out if o["error"]]
    calls = 0
    for o, choice in zip(out[:9], choices):
        (answer,) = ChatCompletion.model_validate(o["response"]["body"]).choices
        assert answer.finish_reason == "tool_calls" and answer.message.content is None and answer.message.tool_calls
        for call in answer.message.tool_calls:
            if isinstance(choice, dict):
                assert call.function.name == "weather"
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
            calls += 1
    assert calls >= 9
    (text,) = ChatCompletion.model_validate(out[9]["response"]["body"]).choices
    assert text.message.tool_calls is None and text.message.content and text.finish_reason in ("stop", "length")


def test_tool_choice_auto_with_the_hermes_parser_on_the_real_engine(pipeline, tmp_path):
    """tool_choice "auto" read by vLLM's hermes parser (engine.tool_call_parser, a job setting: the
    session's engine keeps running). The 135M model may or may not call a tool, and its chat
    template does not write the tools; one line shows it the format in an earlier turn. Every
    line is a valid ChatCompletion; any calls it makes have a name and JSON arguments (the parser
    does not check them against the tools, as vLLM's server does not)."""
    shown = '<tool_call>{"name": "weather", "arguments": {"city": "Rome", "unit": "C"}}</tool_call>'
    conversations = [
        [{"role": "user", "content": "What is the weather in Paris?"}],
        [
            {"role": "system", "content": "Call a tool by writing <tool_call>{json}</tool_call>."},
            {"role": "user", "content": "Weather in Rome?"},
            {"role": "assistant", "content": shown},
            {"role": "user", "content": "Weather in Oslo?"},
        ],
    ]
    lines = [
        {
            "custom_id": f"a{k}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"messages": messages, "tools": TOOLS, "max_tokens": 64, "temperature": 0, **choice},
        }
        for k, (messages, choice) in enumerate(
            (m, c)
            for m in conversations
            for c in ({"tool_choice": "auto"}, {})  # (absent: "auto")
        )
    ]
    src = tmp_path / "auto.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    config = pipeline.config.replace(engine={"tool_call_parser": "hermes"})
    prepare_job(src, tmp_path / "out.jsonl", config=config, notify=lambda m: None).run(pipeline, progress=False)
    out = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [o["custom_id"] for o in out] == [x["custom_id"] for x in lines]
    assert all(o["error"] is None for o in out), [o["error"] for o in out if o["error"]]
    for o in out:
        (answer,) = ChatCompletion.model_validate(o["response"]["body"]).choices
        if answer.message.tool_calls:
            assert answer.finish_reason == "tool_calls"
            for call in answer.message.tool_calls:
                assert call.function.name
                json.loads(call.function.arguments)  # (raises where they are not JSON)
        else:
            assert answer.message.content and answer.finish_reason in ("stop", "length")
