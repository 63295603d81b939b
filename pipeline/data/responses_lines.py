"""OpenAI batch lines for ``/v1/responses``, answered by the chat task: ``instructions`` and ``input`` become the
conversation, and the answer is OpenAI's ``response`` object."""

from __future__ import annotations

from typing import Any

from pipeline.data.openai_format import ResponsesBody, read_as
from pipeline.data.openai_output import (
    IncompleteDetails,
    InputTokensDetails,
    OutputMessage,
    OutputText,
    OutputTokensDetails,
    ResponseObject,
    ResponseUsage,
)
from pipeline.results import RowResult

ROLES = ("user", "assistant", "system", "developer")


def responses_request(value: Any, adapters=frozenset()) -> tuple[dict | None, str | None]:
    """A parsed ``/v1/responses`` body as a chat row and None, or None and why it cannot be one."""
    body, error = read_as(value, ResponsesBody, "body")
    if body is None:
        return None, error
    if body.stream:
        return None, "body asks for stream; a batch's answers are not streamed"
    if body.background:
        return None, "body.background is not supported (a batch line is answered in the batch)"
    refused = next((k for k in ResponsesBody.REFUSED if getattr(body, k)), None)
    if refused is not None:
        return None, f"body.{refused} is not supported ({ResponsesBody.REFUSED[refused]})"
    messages, error = _messages(body.input)
    if error is not None:
        return None, error
    if body.instructions:
        messages.insert(0, {"role": "system", "content": body.instructions})
    row: dict[str, Any] = {
        "messages": messages,
        "max_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
    }
    form = body.text.format if body.text is not None else None
    if form is not None and form.type == "json_schema":
        if form.schema is None:
            return None, "body.text.format.schema is missing"
        row["json_schema"] = form.schema
    elif form is not None and form.type == "json_object":
        row["json_schema"] = {"type": "object"}
    if body.model in adapters:
        row["adapter"] = body.model
    return {k: v for k, v in row.items() if v is not None}, None


def _messages(value: Any) -> tuple[list[dict], str | None]:
    """``input`` as chat messages: a text is the user's message, and items are messages of text."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}], None
    if not isinstance(value, list) or not value:
        return [], "body.input must be a text or a non-empty list of messages"
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            return [], f"body.input[{i}] is not an object"
        kind = item.get("type", "message")
        if kind != "message":
            return [], f"body.input[{i}].type {kind!r} is not supported (messages of text only)"
        if item.get("role") not in ROLES:
            return [], f"body.input[{i}].role must be one of {', '.join(ROLES)} (got {item.get('role')!r})"
        content = item.get("content")
        if isinstance(content, list):
            bad = next((k for k, p in enumerate(content) if not _text_part(p)), None)
            if bad is not None:
                return [], f"body.input[{i}].content[{bad}]: only input_text parts are supported"
            content = "".join(p["text"] for p in content)
        out.append({"role": item["role"], "content": content})
    return out, None


def _text_part(part: Any) -> bool:
    return (
        isinstance(part, dict)
        and part.get("type") in ("input_text", "output_text")
        and isinstance(part.get("text"), str)
    )


def response_body(position: int, result: RowResult, model: str, created: int, max_tokens: int) -> ResponseObject:
    """A row's answer as OpenAI's ``response``, ``incomplete`` if it stopped at its token limit."""
    cut = result.finish_reason == "length" or (result.finish_reason is None and result.completion_tokens >= max_tokens)
    status = "incomplete" if cut else "completed"
    message = OutputMessage(id=f"msg_{position}", status=status, content=[OutputText(text=result.answer or "")])
    usage = ResponseUsage(
        input_tokens=result.prompt_tokens,
        input_tokens_details=InputTokensDetails(result.cached_tokens),
        output_tokens=result.completion_tokens,
        output_tokens_details=OutputTokensDetails(),
        total_tokens=result.prompt_tokens + result.completion_tokens,
    )
    return ResponseObject(
        id=f"resp_{position}",
        created_at=created,
        model=model,
        status=status,
        output=[message],
        usage=usage,
        incomplete_details=IncompleteDetails("max_output_tokens") if cut else None,
    )
