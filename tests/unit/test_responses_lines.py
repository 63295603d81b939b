"""OpenAI batch lines for /v1/responses: the input (a text, or message items) after the
instructions is a chat; max_output_tokens, temperature, top_p and text.format set the sampling;
the answer is OpenAI's Response object (the ``openai`` package's own type reads it); what a batch
line cannot do is an error row naming the field. The real model's answers:
tests/engine/test_completion_lines_engine.py."""

import json

import pytest
from openai.types.responses import Response

from pipeline import Pipeline, load_config, prepare_job
from pipeline.data.request_rows import request_row
from pipeline.data.responses_lines import response_body
from pipeline.results import RowResult

URL = "/v1/responses"


def line(custom_id="r", **body):
    return {"custom_id": custom_id, "method": "POST", "url": URL, "body": body}


def test_a_responses_body_reads_as_a_chat_row():
    row, error = request_row(
        line(
            input="What is 2+2?",
            instructions="Be brief.",
            max_output_tokens=9,
            temperature=0,
            top_p=0.5,
            store=False,
            metadata={"a": "b"},
        ),
        URL,
    )
    assert error is None and row == {
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
        "max_tokens": 9,
        "temperature": 0,
        "top_p": 0.5,
    }
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "Hi, "}, {"type": "input_text", "text": "there"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]},
        {"role": "user", "content": "Name a colour."},
    ]
    schema = {"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]}
    row, error = request_row(
        line(input=items, text={"format": {"type": "json_schema", "name": "c", "schema": schema, "strict": True}}), URL
    )
    assert error is None and [m["content"] for m in row["messages"]] == ["Hi, there", "Hello.", "Name a colour."]
    assert row["json_schema"] == schema


@pytest.mark.parametrize(
    "body, why",
    [
        ({}, "body.input must be a text or a non-empty list of messages"),
        ({"input": "x", "stream": True}, "body asks for stream"),
        ({"input": "x", "background": True}, "body.background is not supported"),
        ({"input": "x", "previous_response_id": "resp_1"}, "body.previous_response_id is not supported"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "body.tools is not supported"),
        ({"input": [{"type": "input_image", "image_url": "x"}]}, "body.input[0].type 'input_image' is not supported"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "body.input[0].content[0]: only input_text parts are supported",
        ),
        ({"input": "x", "max_output_tokens": "many"}, "body.max_output_tokens: expected int or null, got str"),
        (
            {"input": "x", "text": {"format": {"type": "json_schema", "name": "c"}}},
            "body.text.format.schema is missing",
        ),
    ],
)
def test_what_a_batch_line_cannot_do_names_the_field(body, why):
    row, error = request_row(line(**body), URL)
    assert row is None and error.startswith(why), error


def test_an_answer_is_openais_response_object():
    done = Response.model_validate(
        json.loads(
            _encode(
                response_body(
                    3,
                    RowResult(
                        3, answer="Four.", prompt_tokens=20, cached_tokens=16, completion_tokens=3, finish_reason="stop"
                    ),
                    "m",
                    1_700_000_000,
                    16,
                )
            )
        )
    )
    assert done.status == "completed" and done.output_text == "Four." and done.incomplete_details is None
    assert (
        done.usage.input_tokens,
        done.usage.input_tokens_details.cached_tokens,
        done.usage.output_tokens,
        done.usage.total_tokens,
    ) == (20, 16, 3, 23)
    cut = Response.model_validate(
        json.loads(
            _encode(
                response_body(
                    4, RowResult(4, answer="Four and", completion_tokens=2, finish_reason="length"), "m", 0, 16
                )
            )
        )
    )
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"


def _encode(body) -> str:
    import msgspec

    return msgspec.json.encode(body).decode()


def test_a_responses_file_through_the_cluster(tmp_path):
    lines = [
        line("a", input="Hello", max_output_tokens=4),
        line("b", input="x", previous_response_id="resp_0"),
        line("c", input=[{"role": "user", "content": "Hi"}], instructions="Be brief."),
    ]
    src = tmp_path / "responses.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    config = load_config().replace(scheduler={"dashboard_address": None})
    with Pipeline(config, engine="fake") as p:
        summary = prepare_job(src, tmp_path / "out.jsonl", config=p.config, notify=lambda m: None).run(
            p, progress=False
        )
    out = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [o["custom_id"] for o in out] == ["a", "b", "c"] and summary.errors == 1
    for o in (out[0], out[2]):
        response = Response.model_validate(o["response"]["body"])
        assert response.object == "response" and response.output[0].type == "message"
        assert response.usage.input_tokens > 0 and o["error"] is None
    assert out[1]["error"]["message"].startswith("input: body.previous_response_id is not supported")
