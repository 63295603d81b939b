"""Turns an OpenAI batch line into a row of the task that answers its endpoint. A line that cannot be one is an error
row whose reason names the field from the line's top."""

from __future__ import annotations

import json
from typing import Any

from pipeline.data.chat_tools import tool_fields
from pipeline.data.openai_format import ChatBody, EmbeddingsBody, RequestLine, read_as
from pipeline.data.scoring_lines import wrong_url
from pipeline.names import CHAT_URL, EMBEDDINGS_URL, RESPONSES_URL


def parse_line(raw: bytes) -> tuple[Any, str | None]:
    """A JSONL line's request (parsed JSON) and None, or None and why it is not one."""
    try:
        return json.loads(raw.decode("utf-8")), None
    except UnicodeDecodeError:
        return None, "line is not valid UTF-8 text"
    except json.JSONDecodeError as exc:
        return None, f"line is not valid JSON ({exc.msg} at column {exc.colno})"


def request_row(
    request: Any, endpoint: str = CHAT_URL, adapters=frozenset(), tool_parser: str | None = None
) -> tuple[dict | None, str | None]:
    """A parsed request line as a row of the task's columns and None, or None and why not. A chat ``model`` naming
    one of ``adapters`` picks that adapter; ``tool_parser`` reads a tool_choice "auto" answer (None: an error line)."""
    line, error = read_as(request, RequestLine)
    if line is None:
        return None, error
    if line.url != endpoint:
        return None, wrong_url(line.url, endpoint)
    if endpoint == EMBEDDINGS_URL:
        return _embedding_request(line.body)
    if endpoint == RESPONSES_URL:
        from pipeline.data.responses_lines import responses_request

        return responses_request(line.body, adapters)
    body, error = read_as(line.body, ChatBody, "body")
    if body is None:
        return None, error
    if body.stream:
        return None, "body asks for stream; a batch's answers are not streamed"
    refused = [k for k in ChatBody.REFUSED if getattr(body, k)]
    if refused:
        return None, f"body.{refused[0]} is not supported (use tools)"
    tools, error = tool_fields(body, tool_parser)
    if error is not None:
        return None, error
    row = {"messages": body.messages, **body.sampling(), **tools}
    if body.model in adapters:
        row["adapter"] = body.model
    return row, None


def _embedding_request(value: dict) -> tuple[dict | None, str | None]:
    """An embeddings request's one text."""
    body, error = read_as(value, EmbeddingsBody, "body")
    if body is None:
        return None, error
    text = body.input
    if isinstance(text, list):
        if len(text) != 1:
            return None, "body.input must be a string (one text per request)"
        text = text[0]
    if body.encoding_format != "float":
        return None, f"body.encoding_format {body.encoding_format!r} is not supported (float only)"
    if body.dimensions is not None:
        return None, "body.dimensions is not supported (embeddings have the model's size)"
    return {"document": text}, None
