"""The OpenAI batch format's typed models (pipeline/data/openai_format.py): the lines the file job
and the service write validate against the ``openai`` package's own types (chat completions,
embeddings, the error object) and vLLM's (its batch output line, score and rerank responses);
a request line that is not one is an error row naming the field."""

import json
import subprocess
import sys

import pytest
from openai.types import CreateEmbeddingResponse
from openai.types.chat import ChatCompletion
from openai.types.shared import ErrorObject

from pipeline.data.openai_output import decode, encode
from pipeline.data.request_rows import request_row
from pipeline.data.scoring_lines import lines_of, scoring_request
from pipeline.jobs.openai_batch import output_line
from pipeline.results import RowResult
from pipeline.service.result_files import error_line


def _logprob(token, logprob):
    return {
        "token": token,
        "logprob": logprob,
        "top_logprobs": [{"token": token, "logprob": logprob}, {"token": "é", "logprob": -3.5}],
    }


def chat_line(**fields) -> dict:
    result = RowResult(3, answer="Paris.", prompt_tokens=20, cached_tokens=16, completion_tokens=3, **fields)
    return json.loads(output_line(3, "q-3", result, "smollm2", max_tokens=3, created=1_700_000_000))


def embedding_line() -> dict:
    result = RowResult(0, embedding=[0.25, -0.5, 1.0], prompt_tokens=7)
    return json.loads(output_line(0, "e-0", result, "minilm", 16, 1_700_000_000, endpoint="/v1/embeddings"))


def scoring_lines() -> list[dict]:
    def row(line, index, kind, score, **more):
        carry = {"line": line, "custom_id": f"s-{line}", "kind": kind, "index": index, "top_n": 1, **more}
        return {"id": json.dumps(carry), "score": score, "error": None, "prompt_tokens": 10, "cached_tokens": 4}

    rows = [
        row(0, 0, "score", 0.9),
        row(0, 1, "score", 0.1),
        row(1, 0, "rerank", 0.2, document="a"),
        row(1, 1, "rerank", 0.7, document="b"),
    ]
    return [json.loads(line) for line in lines_of(rows, 0, "smollm2", 1_700_000_000).splitlines()]


def keys_known(value: dict, model) -> None:
    """Every key of ``value`` is a field of ``model`` (openai's models keep unknown keys as extras)."""
    assert set(value) <= set(model.model_fields), set(value) - set(model.model_fields)


def test_a_chat_answer_is_openais_chat_completion_with_usage_and_logprobs():
    line = chat_line(
        finish_reason="stop",
        logprobs=[_logprob("Paris", -0.1)],
        choices=[
            {
                "answer": "Paris.",
                "finish_reason": "stop",
                "completion_tokens": 3,
                "logprobs": [_logprob("Paris", -0.1)],
            },
            {"answer": "Lyon", "finish_reason": None, "completion_tokens": 3, "logprobs": None},
        ],
    )
    body = line["response"]["body"]
    completion = ChatCompletion.model_validate(body)
    keys_known(body, ChatCompletion)
    assert [c.message.content for c in completion.choices] == ["Paris.", "Lyon"]
    assert [c.finish_reason for c in completion.choices] == ["stop", "length"]  # (3 of max_tokens 3)
    assert completion.choices[0].logprobs.content[0].top_logprobs[1].bytes == [195, 169]
    assert completion.choices[1].logprobs is None
    assert (
        completion.usage.prompt_tokens,
        completion.usage.completion_tokens,
        completion.usage.total_tokens,
        completion.usage.prompt_tokens_details.cached_tokens,
    ) == (20, 3, 23, 16)
    assert line["custom_id"] == "q-3" and line["error"] is None and line["response"]["status_code"] == 200


def test_an_embedding_answer_is_openais_create_embedding_response():
    body = embedding_line()["response"]["body"]
    response = CreateEmbeddingResponse.model_validate(body)
    keys_known(body, CreateEmbeddingResponse)
    assert response.data[0].embedding == [0.25, -0.5, 1.0] and response.usage.prompt_tokens == 7


def test_the_error_files_line_carries_openais_error_object():
    failed = output_line(5, "q-5", RowResult(5, error="input: messages must be a non-empty list"), "m", 16, 0)
    assert json.loads(failed)["response"] == {"status_code": 400, "request_id": "pipeline-batch-5", "body": None}
    out = json.loads(encode(error_line(decode(failed))))
    error = ErrorObject.model_validate(out["response"]["body"]["error"])
    assert (error.type, error.message, out["response"]["status_code"], out["custom_id"]) == (
        "invalid_request_error",
        "input: messages must be a non-empty list",
        400,
        "q-5",
    )
    died = output_line(0, "x", RowResult(0, error="engine: the engine died"), "m", 16, 0)
    out = json.loads(encode(error_line(decode(died))))
    assert out["response"]["status_code"] == 500 and out["response"]["body"]["error"]["type"] == "server_error"


def test_the_lines_validate_against_vllms_own_batch_and_scoring_models():
    """vLLM's models, in a process of their own (importing vLLM takes seconds and loads torch)."""
    lines = [chat_line(finish_reason="stop"), embedding_line(), *scoring_lines()]
    check = (
        "import json, sys\n"
        "from vllm.entrypoints.launchers.run_batch import BatchRequestOutput\n"
        "from vllm.entrypoints.pooling.scoring.protocol import RerankResponse, ScoreResponse\n"
        "lines = json.load(sys.stdin)\n"
        "for line in lines:\n"
        "    BatchRequestOutput.model_validate(line)\n"
        "ScoreResponse.model_validate(lines[2]['response']['body'])\n"
        "RerankResponse.model_validate(lines[3]['response']['body'])\n"
        "print('valid', len(lines))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], input=json.dumps(lines), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "valid 4", done.stderr[-2000:]
    assert [r["relevance_score"] for r in lines[3]["response"]["body"]["results"]] == [0.7]  # (top_n 1)


@pytest.mark.parametrize(
    "line, why",
    [
        ([1, 2], "line is not a JSON object"),
        ({"url": "/v1/chat/completions", "body": {}}, "custom_id is missing"),
        ({"custom_id": 7, "url": "/v1/chat/completions", "body": {}}, "custom_id: expected str, got int"),
        (
            {"custom_id": "a", "method": "GET", "url": "/v1/chat/completions", "body": {}},
            "method: invalid enum value 'GET'",
        ),
        ({"custom_id": "a", "url": "/v1/chat/completions"}, "body is missing"),
        (
            {"custom_id": "a", "url": "/v1/chat/completions", "body": {"messages": [], "temperature": "hot"}},
            "body.temperature: expected number or null, got str",
        ),
        (
            {
                "custom_id": "a",
                "url": "/v1/chat/completions",
                "body": {"messages": [], "response_format": {"type": "xml"}},
            },
            "body.response_format.type: invalid value 'xml'",
        ),
    ],
)
def test_a_line_that_is_not_a_request_says_which_field(line, why):
    row, error = request_row(line)
    assert row is None and error.startswith(why), error


def test_a_request_written_with_openais_fields_reads_as_the_rows_columns():
    body = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 9,
        "temperature": 0,
        "top_p": 0.5,
        "stop": ["\n"],
        "seed": 3,
        "n": 2,
        "logprobs": True,
        "top_logprobs": 2,
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}},
        "user": "someone",
        "metadata": {"k": "v"},
    }  # (fields not served are ignored, as OpenAI does)
    row, error = request_row({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": body})
    assert error is None and row == {
        "messages": body["messages"],
        "max_tokens": 9,
        "temperature": 0,
        "top_p": 0.5,
        "stop": ["\n"],
        "seed": 3,
        "n": 2,
        "logprobs": True,
        "top_logprobs": 2,
        "json_schema": {"type": "object"},
    }
    scoring, error = scoring_request(
        {"custom_id": "s", "url": "/v1/rerank", "body": {"query": "q", "documents": ["a", "b"], "top_n": 1}}
    )
    assert error is None and scoring == {"kind": "rerank", "pairs": [("q", "a"), ("q", "b")], "top_n": 1}
