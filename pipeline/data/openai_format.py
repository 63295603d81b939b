"""The OpenAI batch format's request lines as msgspec models, as OpenAI's Batch API and ``vllm run-batch`` read them.
A request is read as its envelope, then its body as the endpoint's model. Undeclared fields are ignored, as OpenAI
ignores them; a declared field of the wrong type makes the line an error row naming the field. What the values
mean is checked by the code that uses them."""

from __future__ import annotations

import re
from typing import Any, Literal, TypeVar

import msgspec
from msgspec import Struct


class RequestLine(Struct, kw_only=True):
    """A line's envelope."""

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
    """vLLM's own structured-output field; only its ``json`` and ``choice`` kinds are served."""

    json: dict[str, Any] | None = None
    choice: list[str] | None = None


class FunctionSpec(Struct, kw_only=True):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(Struct, kw_only=True):
    """A chat body's tool. Types other than function are refused where the tools are used."""

    type: str
    function: FunctionSpec | None = None


class NamedFunction(Struct):
    name: str


class NamedToolChoice(Struct, kw_only=True):
    type: Literal["function"]
    function: NamedFunction


class _SamplingBody(Struct, kw_only=True):
    """The fields that chat and completion bodies share."""

    model: str | None = None
    max_tokens: int | None = None
    temperature: int | float | None = None  # kept as given, so that an error quotes it as written
    top_p: int | float | None = None
    top_k: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int | None = None
    response_format: TextFormat | JsonObjectFormat | JsonSchemaFormat | None = None
    structured_outputs: StructuredOutputs | None = None
    stream: bool | None = None

    def _given(self, names: tuple[str, ...], **more) -> dict:
        """The fields ``names``, then ``more``, then the constraint on the answer as the row columns ``json_schema``
        and ``choice``; only those given."""
        out = {k: getattr(self, k) for k in names} | more
        if isinstance(self.response_format, JsonSchemaFormat):
            out["json_schema"] = self.response_format.json_schema.schema
        elif isinstance(self.response_format, JsonObjectFormat):
            out["json_schema"] = {"type": "object"}
        if self.structured_outputs is not None:
            out["choice"] = self.structured_outputs.choice
            if self.structured_outputs.json is not None:
                out["json_schema"] = self.structured_outputs.json
        return {k: v for k, v in out.items() if v is not None}


class ChatBody(_SamplingBody, kw_only=True):
    """A ``/v1/chat/completions`` body's served fields; the template checks ``messages``, pipeline/sampling.py the
    rest."""

    messages: Any = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    # These would change what a response holds, so they are refused where given.
    functions: Any = None
    function_call: Any = None
    audio: Any = None

    REFUSED = ("functions", "function_call", "audio")

    def sampling(self) -> dict:
        """The sampling fields given, under the row columns' names; max_completion_tokens wins over max_tokens."""
        names = ("temperature", "top_p", "top_k", "stop", "seed", "n", "logprobs", "top_logprobs")
        most = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        return self._given(names, max_tokens=most)


class CompletionBody(_SamplingBody, kw_only=True):
    """A ``/v1/completions`` body's served fields; ``logprobs`` is a count, as in OpenAI's legacy endpoint."""

    prompt: Any = None
    logprobs: int | None = None
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = None

    def sampling(self) -> dict:
        more = {"logprobs": True, "top_logprobs": self.logprobs} if self.logprobs is not None else {}
        return self._given(("max_tokens", "temperature", "top_p", "top_k", "stop", "seed", "n"), **more)

    def refused(self) -> str | None:
        if self.stream:
            return "body asks for stream; a batch's answers are not streamed"
        if self.echo:
            return "body.echo is not supported (the answer's text only)"
        if self.suffix:
            return "body.suffix is not supported (no text is inserted after the answer)"
        if self.best_of not in (None, 1):
            return "body.best_of is not supported (use n for several answers)"
        return None


class ResponseFormat(Struct, kw_only=True):
    """A Responses API body's ``text.format``; a JSON schema's fields sit at the same level as ``type``."""

    type: Literal["text", "json_object", "json_schema"]
    schema: dict[str, Any] | None = None
    name: str | None = None
    strict: bool | None = None
    description: str | None = None


class ResponseText(Struct, kw_only=True):
    format: ResponseFormat | None = None


class ResponsesBody(Struct, kw_only=True):
    """A ``/v1/responses`` body's served fields; ``instructions`` is the system message."""

    input: Any = None
    instructions: str | None = None
    model: str | None = None
    max_output_tokens: int | None = None
    temperature: int | float | None = None
    top_p: int | float | None = None
    text: ResponseText | None = None
    stream: bool | None = None
    background: bool | None = None
    # what a batch line cannot do, refused where given
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
    """A ``/v1/embeddings`` body with one text, alone or in a list."""

    input: str | list[str]
    model: str | None = None
    encoding_format: str = "float"
    dimensions: int | None = None


Texts = str | list[str] | None


class ScoringBody(Struct, kw_only=True):
    """What vLLM's scoring bodies share; the fields that change how vLLM makes its scores are refused."""

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
    """vLLM's ``/v1/score`` body, whose pairs come in one of four spellings."""

    queries: Texts = None
    documents: Texts = None
    items: Texts = None
    data_1: Texts = None
    data_2: Texts = None
    text_1: Texts = None
    text_2: Texts = None

    SPELLINGS = (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2"))


class RerankBody(ScoringBody, kw_only=True):
    """vLLM's ``/v1/rerank`` body; ``top_n`` says how many documents to keep, 0 for all."""

    query: str
    documents: str | list[str]
    top_n: int | None = None


B = TypeVar("B")


def read_as(value: Any, model: type[B], root: str = "") -> tuple[B | None, str | None]:
    """``value`` as ``model`` and None, or None and why not, naming the field from the line's top:
    ``body.temperature: expected number or null, got str``."""
    try:
        return msgspec.convert(value, model), None
    except msgspec.ValidationError as exc:
        message, _, at = str(exc).partition(" - at `$")
        path = root + at.rstrip("`")
        missing = re.fullmatch(r"Object missing required field `(.+)`", message)
        if missing:
            return None, f"{path}.{missing[1]}".lstrip(".") + " is missing"
        if message.startswith("Expected `object`") and not path:
            return None, "line is not a JSON object"
        message = message.replace("`", "").replace(" | ", " or ").replace("array", "list")
        message = message.replace("int or float", "number")
        message = message[0].lower() + message[1:]
        return None, f"{path.lstrip('.')}: {message}" if path else message
