"""Tools in chat lines (pipeline/data/chat_tools.py): "required" and a named function become
structured output over the tools' parameter schemas and come back as OpenAI's
``message.tool_calls`` with ``finish_reason`` "tool_calls"; "none" is a text answer; "auto" and
the tools or choices the cluster cannot serve are error rows naming the field. The real model's
calls: tests/engine/test_chat_tools_engine.py."""

import json

import pytest
from openai.types.chat import ChatCompletion

from pipeline.data.request_rows import request_row
from pipeline.jobs.openai_batch import output_line
from pipeline.results import RowResult
from pipeline.sampling import checked

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    {"type": "function", "function": {"name": "weather", "description": "The weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "time", "parameters": {"type": "object", "properties": {}}}},
]
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]


def chat(**body):
    return {"custom_id": "t", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": MESSAGES, **body}}


def test_required_asks_for_a_list_of_calls_and_a_named_function_for_its_arguments():
    row, error = request_row(chat(tools=TOOLS, tool_choice="required"))
    assert error is None and row["tools"] == TOOLS
    schema = row["json_schema"]
    assert schema["type"] == "array" and schema["minItems"] == 1
    assert [s["properties"]["name"]["enum"] for s in schema["items"]["anyOf"]] == [["weather"], ["time"]]
    assert schema["items"]["anyOf"][0]["properties"]["parameters"] == WEATHER
    checked({"json_schema": schema})  # (a schema the sampling checks take)
    row, error = request_row(chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "weather"}}))
    assert error is None and row["json_schema"] == WEATHER
    row, error = request_row(chat(tools=TOOLS, tool_choice="none"))
    assert error is None and "json_schema" not in row and "tools" not in row


@pytest.mark.parametrize(
    "body, why",
    [
        ({"tools": TOOLS}, 'body.tool_choice "auto" (the default where tools are given) needs a tool-call parser'),
        ({"tools": TOOLS, "tool_choice": "auto"}, 'body.tool_choice "auto"'),
        ({"tool_choice": "required"}, "body.tool_choice 'required' names tools, and body.tools gives none"),
        (
            {"tools": [{"type": "web_search"}], "tool_choice": "required"},
            "body.tools[0].type 'web_search' is not supported (function tools only)",
        ),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "body.tool_choice names function 'nope', which body.tools does not give",
        ),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "body.tool_choice: invalid enum value 'sometimes'"),
        ({"functions": [{"name": "f"}]}, "body.functions is not supported (use tools)"),
    ],
)
def test_what_the_cluster_cannot_serve_is_an_error_naming_the_field(body, why):
    row, error = request_row(chat(**body))
    assert row is None and error.startswith(why), error


def test_calls_come_back_as_openais_tool_calls():
    calls = json.dumps([{"name": "weather", "parameters": {"city": "Paris"}}, {"name": "time", "parameters": {}}])
    result = RowResult(0, answer=calls, answer_json=calls, prompt_tokens=30, completion_tokens=20, finish_reason="stop")
    body = json.loads(output_line(4, "t", result, "m", 64, 0, tool="required"))["response"]["body"]
    completion = ChatCompletion.model_validate(body)
    (choice,) = completion.choices
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert [(c.type, c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls] == [
        ("function", "weather", {"city": "Paris"}),
        ("function", "time", {}),
    ]
    assert len({c.id for c in choice.message.tool_calls}) == 2
    named = RowResult(0, answer='{"city": "Lyon"}', answer_json='{"city":"Lyon"}', completion_tokens=8)
    body = json.loads(output_line(5, "t", named, "m", 64, 0, tool="weather"))["response"]["body"]
    (call,) = ChatCompletion.model_validate(body).choices[0].message.tool_calls
    assert call.function.name == "weather" and json.loads(call.function.arguments) == {"city": "Lyon"}
    text = json.loads(output_line(6, "t", RowResult(0, answer="Sunny."), "m", 64, 0))["response"]["body"]
    assert text["choices"][0]["message"] == {"content": "Sunny.", "role": "assistant"}  # (no tool_calls key)
