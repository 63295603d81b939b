"""The OpenAI batch format as typed models (msgspec Structs): the request line's envelope, each
endpoint's body, and the output and error lines, as OpenAI's Batch API and ``vllm run-batch``
read and write them. Every module that reads or writes a batch line goes through these: the file
job (pipeline/jobs/openai_batch.py, pipeline/steps/jsonl_input.py), the scoring lines
(pipeline/data/scoring_lines.py) and the service's result files (pipeline/service/result_files.py).
tests/unit/test_openai_format.py checks the lines against the ``openai`` package's own types and
vLLM's.

A request is read in two steps: its envelope (``RequestLine``, for any endpoint), then its body
as the endpoint's model (``ChatBody``, ``EmbeddingsBody``, ``ScoreBody``, ``RerankBody``). Fields a
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


class ChatBody(Struct, kw_only=True):
    """A ``/v1/chat/completions`` body: the fields served. ``messages`` is checked by the chat
    template (pipeline/tasks), the sampling values by pipeline/sampling.py."""
    messages: Any = None
    model: str | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: int | float | None = None   # (kept as given: an error quotes the value as written)
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
    # what would change what a response holds, which is not produced: refused where given
    tools: Any = None
    tool_choice: Any = None
    functions: Any = None
    function_call: Any = None
    audio: Any = None

    REFUSED = ("tools", "tool_choice", "functions", "function_call", "audio")

    def sampling(self) -> dict:
        """The sampling fields given, under the row columns' names (pipeline/sampling.py), as
        ``vllm run-batch`` reads them: max_completion_tokens (or max_tokens), temperature, top_p,
        top_k, stop, seed, n, logprobs, top_logprobs, and a JSON schema from ``response_format``
        (json_schema or json_object) or vLLM's ``structured_outputs`` (json or choice)."""
        out = {k: getattr(self, k) for k in ("temperature", "top_p", "top_k", "stop", "seed", "n", "logprobs",
                                               "top_logprobs")}
        out["max_tokens"] = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        if isinstance(self.response_format, JsonSchemaFormat):
            out["json_schema"] = self.response_format.json_schema.schema
        elif isinstance(self.response_format, JsonObjectFormat):
            out["json_schema"] = {"type": "object"}
        if self.structured_outputs is not None:
            out["choice"] = self.structured_outputs.choice
            if self.structured_outputs.json is not None:
                out["json_schema"] = self.structured_outputs.json
        return {k: v for k, v in out.items() if v is not None}


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

    REFUSED = ("truncate_prompt_tokens", "max_tokens_per_query", "max_tokens_per_doc", "instruction",
               "chat_template_kwargs")


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


# ---- output lines --------------------------------------------------------------------------


class PromptTokensDetails(Struct):
    cached_tokens: int


class Usage(Struct, kw_only=True):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None


class TopLogprob(Struct):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(Struct):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(Struct):
    content: list[TokenLogprob]


class AssistantMessage(Struct, kw_only=True):
    content: str | None
    role: str = "assistant"


class ChatChoice(Struct, kw_only=True):
    index: int
    message: AssistantMessage
    finish_reason: str
    logprobs: ChoiceLogprobs | None = None


class ChatCompletion(Struct, kw_only=True):
    """OpenAI's ``chat.completion``."""
    id: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    object: str = "chat.completion"


class Embedding(Struct, kw_only=True):
    embedding: list[float]
    index: int = 0
    object: str = "embedding"


class EmbeddingUsage(Struct):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(Struct, kw_only=True):
    """OpenAI's response to an embeddings request (``CreateEmbeddingResponse``)."""
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
    object: str = "list"


class ScoreData(Struct, kw_only=True):
    index: int
    score: float
    object: str = "score"


class ScoreResponse(Struct, kw_only=True):
    """vLLM's ``ScoreResponse``: each pair's score, in the pairs' order."""
    id: str
    created: int
    model: str
    data: list[ScoreData]
    usage: Usage
    object: str = "list"


class RerankDocument(Struct, kw_only=True):
    text: str
    multi_modal: None = None


class RerankResult(Struct, kw_only=True):
    index: int
    document: RerankDocument
    relevance_score: float


class RerankUsage(Struct):
    prompt_tokens: int
    total_tokens: int


class RerankResponse(Struct, kw_only=True):
    """vLLM's ``RerankResponse``: the documents by score, highest first."""
    id: str
    model: str
    usage: RerankUsage
    results: list[RerankResult]


class ApiError(Struct, kw_only=True):
    """OpenAI's error object, as a failed request's body holds it: ``{"error": ApiError}``."""
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(Struct):
    error: ApiError


class LineError(Struct):
    """A request the batch did not run (expired, cancelled): the line's ``error``."""
    code: str
    message: str


class Envelope(Struct, kw_only=True):
    """An output line's ``response``. Its ``body``: a ``ChatCompletion``, ``EmbeddingList``,
    ``ScoreResponse``, ``RerankResponse`` or ``ErrorBody`` when written; a plain dict when read
    back (``decode``: the bodies share no tag msgspec could tell them apart by)."""
    status_code: int
    request_id: str
    body: Any = None


class OutputLine(Struct, kw_only=True):
    """An output (or error file) line: ``{"id", "custom_id", "response", "error"}``. A row that
    failed has ``response.body`` null and the reason in ``error``; the service's error file
    moves it into ``response.body.error`` (pipeline/service/result_files.py)."""
    id: str
    custom_id: Any
    response: Envelope | None
    error: str | LineError | None = None


_encoder = msgspec.json.Encoder()


def encode(line: OutputLine) -> str:
    """A line as JSON text (UTF-8, not escaped; no newline)."""
    return _encoder.encode(line).decode("utf-8")


def decode(text: str | bytes) -> OutputLine:
    """An output line written by ``encode`` (its body as a plain dict)."""
    return msgspec.json.decode(text, type=OutputLine)
