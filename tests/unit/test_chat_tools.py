"""Tools in chat lines (pipeline/data/chat_tools.py): "required" and a named function become
structured output over the tools' parameter schemas and come back as OpenAI's
``message.tool_calls`` with ``finish_reason`` "tool_calls"; "none" is a text answer; "auto" is
read by vLLM's tool-call parser named in ``engine.tool_call_parser`` (an error row naming the key
where none is), and the tools or choices the cluster cannot serve are error rows naming the
field. The real model's calls: tests/engine/test_chat_tools_engine.py."""

import asyncio
import json

import pyarrow as pa
import pytest
from openai.types.chat import ChatCompletion

from pipeline import load_config
from pipeline.config import ConfigError
from pipeline.data.chat_tools import tool_mode
from pipeline.data.request_rows import request_row
from pipeline.data.row_checks import RowColumns
from pipeline.jobs.openai_batch import output_line
from pipeline.results import RowResult
from pipeline.sampling import Sampling, checked
from pipeline.steps.prompt_table import prompt_rows_of_dicts
from pipeline.worker.admission import FairAdmission
from pipeline.worker.engine import Generation
from pipeline.worker.fake_engine import FakeEngine
from pipeline.worker.gcstats import GcPauses
from pipeline.worker.metrics import ShardMetrics
from pipeline.worker.plugin import EnginePlugin
from pipeline.worker.vllm_engine import sampling_params
from tasks import Chat, Columns

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
    required = tool_mode(chat(tools=TOOLS, tool_choice="required"))
    body = json.loads(output_line(4, "t", result, "m", 64, 0, tool=required))["response"]["body"]
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
    # A function may be called "required": named, it is answered as that function, not as tool_choice "required".
    named = tool_mode(chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "required"}}))
    body = json.loads(output_line(5, "t", RowResult(0, answer_json='{"a":1}'), "m", 64, 0, tool=named))
    (call,) = ChatCompletion.model_validate(body["response"]["body"]).choices[0].message.tool_calls
    assert call.function.name == "required" and json.loads(call.function.arguments) == {"a": 1}
    text = json.loads(output_line(6, "t", RowResult(0, answer="Sunny."), "m", 64, 0))["response"]["body"]
    assert text["choices"][0]["message"] == {"content": "Sunny.", "role": "assistant"}  # (no tool_calls key)


# tool_choice "auto": the answer is text, read by vLLM's own tool-call parser (engine.tool_call_parser)
AUTO_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


class ToolsTemplate:
    """Enough of a tokenizer for the chat task: a template that writes the tools it is given, as
    a Hermes-style model's does."""

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False, tools=None):
        text = f"<tools>{json.dumps(tools)}</tools>\n" if tools else ""
        text += "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + "<|im_start|>assistant\n"


class ToolCallingEngine(FakeEngine):
    """Calls get_weather where the prompt offers tools and asks about Paris, else answers in text;
    keeps the settings each request came with."""

    def __init__(self):
        super().__init__()
        self.asked: list[Sampling] = []

    async def generate(self, prompt_ids, request_id, sampling, priority=0):
        self.asked.append(sampling)
        prompt = "".join(map(chr, prompt_ids))
        text = f"Let me look. {CALL}" if "<tools>" in prompt and "Paris" in prompt else "It is sunny."
        return Generation(text=text, prompt_tokens=len(prompt_ids), cached_tokens=0, completion_tokens=9)


def answered_lines(requests, parser):
    """``requests`` read with ``parser`` configured, answered by ``ToolCallingEngine`` on a worker's
    plugin, as output lines' bodies; and the engine."""
    plugin = EnginePlugin(load_config(), model="unused", engine_kind="fake")
    plugin.engine, plugin.shard = ToolCallingEngine(), "s0"
    plugin.metrics, plugin._dead = ShardMetrics("s0", GcPauses()), False
    made = [request_row(r, tool_parser=parser) for r in requests]
    rows = prompt_rows_of_dicts(made, pa.array(range(len(requests)), pa.int64()), Chat(ToolsTemplate()), True)

    async def run():
        plugin._intake, plugin.token_gate = FairAdmission(4), None
        return await plugin.answer_grouped(rows.rows, "b", Sampling(), False)

    results = {r.index: r for r in asyncio.run(run())}
    results.update({e["position"]: RowResult(e["position"], error=e["error"]) for e in rows.errors.to_pylist()})
    lines = [json.loads(output_line(k, "t", results[k], "m", 64, 0, tool=tool_mode(r))) for k, r in enumerate(requests)]
    return lines, plugin.engine


def test_auto_is_read_by_the_configured_parser_into_openais_tool_calls():
    hello = chat(tools=AUTO_TOOLS)
    hello["body"]["messages"] = [{"role": "user", "content": "Hi"}]
    # (tool_choice absent: "auto", OpenAI's default where tools are given)
    lines, engine = answered_lines(
        [chat(tools=AUTO_TOOLS, tool_choice="auto"), chat(tools=AUTO_TOOLS), hello], "hermes"
    )
    for line in lines[:2]:
        (choice,) = ChatCompletion.model_validate(line["response"]["body"]).choices
        assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me look."
        (call,) = choice.message.tool_calls
        assert call.type == "function" and call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"city": "Paris"}
    # ids from the line's place (as "required" calls'), not vLLM's random ones: a resumed job writes the same
    assert lines[0]["response"]["body"]["choices"][0]["message"]["tool_calls"][0]["id"] == "call_0_0_0"
    # an answer that calls nothing is a plain text answer
    (text,) = ChatCompletion.model_validate(lines[2]["response"]["body"]).choices
    assert text.message.content == "It is sunny." and text.message.tool_calls is None and text.finish_reason == "stop"
    # the tools reached the chat template (the engine saw them), and hermes asked for special tokens in the text
    assert all(s.tool_parser == "hermes" and json.loads(s.tools) == AUTO_TOOLS for s in engine.asked)
    assert all(s.keep_special_tokens for s in engine.asked)
    assert sampling_params(engine.asked[0]).skip_special_tokens is False


def test_auto_without_a_parser_is_an_error_line_naming_the_key():
    (line,), engine = answered_lines([chat(tools=AUTO_TOOLS, tool_choice="auto")], None)
    assert line["response"]["status_code"] == 400 and not engine.asked
    assert "engine.tool_call_parser" in line["error"]["message"], line["error"]


def test_a_parser_that_cannot_read_the_model_fails_its_rows_before_the_engine_is_asked():
    (line,), engine = answered_lines([chat(tools=AUTO_TOOLS)], "llama3_json")
    assert not engine.asked
    assert line["error"]["message"].startswith(
        "engine: engine.tool_call_parser 'llama3_json' cannot read this model's answers: RuntimeError"
    ), line["error"]


def test_the_parser_is_one_vllm_knows_and_tables_do_not_set_it():
    assert load_config().replace(engine={"tool_call_parser": "hermes"}).engine.tool_call_parser == "hermes"
    with pytest.raises(
        ConfigError, match=r"engine.tool_call_parser: unknown tool-call parser 'herm'; vLLM's are: .*hermes"
    ):
        load_config().replace(engine={"tool_call_parser": "herm"})
    # (a table's columns of those names are its own, never a row's tool settings)
    assert RowColumns.of(Columns(required=("messages",)), ["messages", "tools", "tool_parser"]).sampling_columns == ()
