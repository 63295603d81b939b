"""Output lines of the OpenAI batch format, as ``vllm run-batch`` writes them.

A row with an answer: ``{"id", "custom_id", "response": {"status_code": 200, "request_id",
"body": <chat.completion>}, "error": null}``. A row that failed: ``"response":
{"status_code": 400, "request_id", "body": null}`` and the reason in ``"error"``. Ids are
derived from the row's position, so a resumed job writes exactly what an uninterrupted one
would.
"""
from __future__ import annotations

import json

from pipeline.results import RowResult


def output_line(position: int, custom_id, result: RowResult, model: str, max_tokens: int, created: int) -> str:
    request_id = f"pipeline-batch-{position}"
    if result.error is not None:
        response = {"status_code": 400, "request_id": request_id, "body": None}
        return json.dumps({"id": f"pipeline-{position}", "custom_id": custom_id, "response": response,
                           "error": result.error}, ensure_ascii=False)
    body = {
        "id": f"chatcmpl-{position}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": result.answer},
            # as the engine says: at max_tokens (length) or at the end of the answer (stop)
            "finish_reason": result.finish_reason or ("length" if result.completion_tokens >= max_tokens else "stop"),
        }],
        "usage": {
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": result.cached_tokens},
        },
    }
    return json.dumps({"id": f"pipeline-{position}", "custom_id": custom_id,
                       "response": {"status_code": 200, "request_id": request_id, "body": body},
                       "error": None}, ensure_ascii=False)
