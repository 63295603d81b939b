"""The OpenAI batch format's request lines as typed models (msgspec Structs): the line's envelope
and each endpoint's body, as OpenAI's Batch API and ``vllm run-batch`` read them (the output
lines: pipeline/data/openai_output.py). Every module that reads a batch line goes through these:
the file job (pipeline/steps/jsonl_input.py, pipeline/data/input.py), the completion and scoring
lines (pipeline/data/completion_lines.py, pipeline/data/scoring_lines.py).

A request is read in two steps: its envelope (``RequestLine``, for any endpoint), then its body
as the endpoint's model (``ChatBody``, ``CompletionBody``, ``EmbeddingsBody``, ``ScoreBody``,
``RerankBody``). Fields a
body does not declare are ignored, as OpenAI ignores them; a declared field of the wrong type
makes the line an error row whose text names the field (``why_invalid``). What the values mean
(a temperature below 0, an empty list of messages) is checked later, by the code that uses them.
"""

from __future__ import annotations

import re
from typing import Any, Literal, TypeVar

import msgspec
from msgspec import Struct

# ---- request lines -------------------------------------------------------------------------


class RequestLine(Struct, kw_only=True):
    """A line's envelope: ``{"custom_id", "method": "POST", "url", "body"}``."""

    custom_id: str
    url: str
    body: dict[str, Any]
    method: Literal["POST"] = "POST"


class JsonSchemaSpec(Struct, kw_only=True):
    schema: dict[str, Any]
    name: str | None = None
    strict: bool | None = None
    description: str | None = None


class TextFormat(Struct, tag_field="type", tag="text"):
    pass


class JsonObjectFormat(Struct, tag_field="type", tag="json_object"):
    pass


class JsonSchemaFormat(Struct, tag_field="type", tag="json_schema"):
    json_schema: JsonSchemaSpec


class StructuredOutputs(Struct, kw_only=True):
    """vLLM's own structured-output field (the ``json`` and ``choice`` kinds are served)."""

    json: dict[str, Any] | None = None
    choice: list[str] | None = None


class FunctionSpec(Struct, kw_only=True):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(Struct, kw_only=True):
    """A chat body's tool: ``{"type": "function", "function": {"name", "description", "parameters"}}``
    (other types are refused where used: pipeline/data/chat_tools.py)."""

    type: str
    function: FunctionSpec | None = None


class NamedFunction(Struct):
    name: str


class NamedToolChoice(Struct, kw_only=True):
    type: Literal["function"]
    function: NamedFunction


class ChatBody(Struct, kw_only=True):
    """A ``/v1/chat/completions`` body: the fields served. ``messages`` is checked by the chat
    template (pipeline/tasks), the sampling values by pipeline/sampling.py."""

    messages: Any = None
    model: str | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: int | float | None = None  # (kept as given: an error quotes the value as written)
    top_p: int | float | None = None
    top_k: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    response_format: TextFormat | JsonObjectFormat | JsonSchemaFormat | None = None
    structured_outputs: StructuredOutputs | None = None
    stream: bool | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    # what would change what a response holds, which is not produced: refused where given
    functions: Any = None
    function_call: Any = None
    audio: Any = None

    REFUSED = ("functions", "function_call", "audio")

    def sampling(self) -> dict:
        """The sampling fields given, under the row columns' names (pipeline/sampling.py), as
        ``vllm run-batch`` reads them: max_completion_tokens (or max_tokens), temperature, top_p,
        top_k, stop, seed, n, logprobs, top_logprobs, and a JSON schema from ``response_format``
        (json_schema or json_object) or vLLM's ``structured_outputs`` (json or choice)."""
        out = {
            k: getattr(self, k)
            for k in ("temperature", "top_p", "top_k", "stop", "seed", "n", "logprobs", "top_logprobs")
        }
        out["max_tokens"] = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        out.update(_constraint(self.response_format, self.structured_outputs))
        return {k: v for k, v in out.items() if v is not None}


class CompletionBody(Struct, kw_only=True):
    """A ``/v1/completions`` body: ``prompt`` (a text, or a list of texts each answered as its own
    choices) and the sampling fields served. ``logprobs`` is a count here, as in OpenAI's legacy
    endpoint: each answer token's log-probability and this many of the likeliest tokens'."""

    prompt: Any = None
    model: str | None = None
    max_tokens: int | None = None
    temperature: int | float | None = None
    top_p: int | float | None = None
    top_k: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int | None = None
    logprobs: int | None = None
    structured_outputs: StructuredOutputs | None = None
    response_format: TextFormat | JsonObjectFormat | JsonSchemaFormat | None = None
    stream: bool | None = None
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = None

    def sampling(self) -> dict:
        """The sampling fields given, under the row columns' names (pipeline/sampling.py)."""
        out = {k: getattr(self, k) for k in ("max_tokens", "temperature", "top_p", "top_k", "stop", "seed", "n")}
        if self.logprobs is not None:
            out["logprobs"], out["top_logprobs"] = True, self.logprobs
        out.update(_constraint(self.response_format, self.structured_outputs))
        return {k: v for k, v in out.items() if v is not None}

    def refused(self) -> str | None:
        """Why the body asks for what a batch does not do, or None."""
        if self.stream:
            return "body asks for stream; a batch's answers are not streamed"
        if self.echo:
            return "body.echo is not supported (the answer's text only)"
        if self.suffix:
            return "body.suffix is not supported (no text is inserted after the answer)"
        if self.best_of not in (None, 1):
            return "body.best_of is not supported (use n for several answers)"
        return None


def _constraint(response_format, structured_outputs: StructuredOutputs | None) -> dict:
    """A body's constraint on its answer as the row columns ``json_schema`` and ``choice``."""
    out: dict[str, Any] = {}
    if isinstance(response_format, JsonSchemaFormat):
        out["json_schema"] = response_format.json_schema.schema
    elif isinstance(response_format, JsonObjectFormat):
        out["json_schema"] = {"type": "object"}
    if structured_outputs is not None:
        out["choice"] = structured_outputs.choice
        if structured_outputs.json is not None:
            out["json_schema"] = structured_outputs.json
    return out


class ResponseFormat(Struct, kw_only=True):
    """A Responses API body's ``text.format``: ``text``, ``json_object``, or ``json_schema`` with
    its ``schema`` (and ``name``, ``strict``, ``description``) at the same level."""

    type: Literal["text", "json_object", "json_schema"]
    schema: dict[str, Any] | None = None
    name: str | None = None
    strict: bool | None = None
    description: str | None = None


class ResponseText(Struct, kw_only=True):
    format: ResponseFormat | None = None


class ResponsesBody(Struct, kw_only=True):
    """A ``/v1/responses`` body: the fields served (pipeline/data/responses_lines.py). ``input``:
    a text, or message items; ``instructions``: the system message."""

    input: Any = None
    instructions: str | None = None
    model: str | None = None
    max_output_tokens: int | None = None
    temperature: int | float | None = None
    top_p: int | float | None = None
    text: ResponseText | None = None
    stream: bool | None = None
    background: bool | None = None
    # what a batch line cannot do: refused where given
    previous_response_id: Any = None
    conversation: Any = None
    prompt: Any = None
    tools: Any = None

    REFUSED = {
        "previous_response_id": "a batch line has no earlier response to continue",
        "conversation": "a batch line has no stored conversation",
        "prompt": "stored prompts are not served; give the input itself",
        "tools": "tools are not served on /v1/responses yet; use /v1/chat/completions lines with tool_choice "
        '"required" or a named function',
    }


class EmbeddingsBody(Struct, kw_only=True):
    """A ``/v1/embeddings`` body: one text (a string, or a list of one string)."""

    input: str | list[str]
    model: str | None = None
    encoding_format: str = "float"
    dimensions: int | None = None


Texts = str | list[str] | None


class ScoringBody(Struct, kw_only=True):
    """What vLLM's two scoring bodies share; the fields that change how vLLM makes its scores,
    which the score task does not do, are refused where given."""

    model: str | None = None
    use_activation: bool | None = None
    truncate_prompt_tokens: Any = None
    max_tokens_per_query: Any = None
    max_tokens_per_doc: Any = None
    instruction: Any = None
    chat_template_kwargs: Any = None

    REFUSED = (
        "truncate_prompt_tokens",
        "max_tokens_per_query",
        "max_tokens_per_doc",
        "instruction",
        "chat_template_kwargs",
    )


class ScoreBody(ScoringBody, kw_only=True):
    """vLLM's ``/v1/score`` body: its pairs in one of four spellings (pipeline/data/scoring_lines.py)."""

    queries: Texts = None
    documents: Texts = None
    items: Texts = None
    data_1: Texts = None
    data_2: Texts = None
    text_1: Texts = None
    text_2: Texts = None

    SPELLINGS = (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2"))


class RerankBody(ScoringBody, kw_only=True):
    """vLLM's ``/v1/rerank`` body: one query, its documents, and how many of them to keep (0: all)."""

    query: str
    documents: str | list[str]
    top_n: int | None = None


B = TypeVar("B")


def read_as(value: Any, model: type[B], root: str = "") -> tuple[B | None, str | None]:
    """``value`` (parsed JSON) as ``model``, and None; or None and why not (``why_invalid``)."""
    try:
        return msgspec.convert(value, model), None
    except msgspec.ValidationError as exc:
        return None, why_invalid(exc, root)


def why_invalid(exc: msgspec.ValidationError, root: str = "") -> str:
    """A validation error as the user reads it, the field named from the line's top:
    ``body.temperature: expected number or null, got str``, ``custom_id is missing``."""
    message, _, at = str(exc).partition(" - at `$")
    path = root + at.rstrip("`")
    missing = re.fullmatch(r"Object missing required field `(.+)`", message)
    if missing:
        return f"{path}.{missing[1]}".lstrip(".") + " is missing"
    if message.startswith("Expected `object`") and not path:
        return "line is not a JSON object"
    message = message.replace("`", "").replace(" | ", " or ").replace("array", "list").replace("int or float", "number")
    message = message[0].lower() + message[1:]
    return f"{path.lstrip('.')}: {message}" if path else message
