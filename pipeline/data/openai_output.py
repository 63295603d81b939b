"""The OpenAI batch format's output lines as msgspec Structs, as OpenAI's Batch API and ``vllm run-batch`` write
them; tests/unit/test_openai_format.py checks them against the ``openai`` package's own types and vLLM's."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import Struct


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


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(Struct):
    content: list[TokenLogprob]


class FunctionCall(Struct):
    name: str
    arguments: str  # JSON text


class ToolCall(Struct, kw_only=True):
    id: str
    function: FunctionCall
    type: str = "function"


class AssistantMessage(Struct, kw_only=True, omit_defaults=True):
    """The answer's message; ``tool_calls`` only where the line asked for them."""

    content: str | None
    role: str  # (always "assistant": given, as a default would be left out)
    tool_calls: list[ToolCall] | None = None


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


class CompletionLogprobs(Struct, kw_only=True):
    """A completion choice's log-probabilities, OpenAI's legacy shape: per answer token, its text,
    its log-probability, the likeliest tokens' (token: log-probability) and where it starts in
    the answer."""

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(Struct, kw_only=True):
    index: int
    text: str
    finish_reason: str
    logprobs: CompletionLogprobs | None = None


class Completion(Struct, kw_only=True):
    """OpenAI's ``text_completion``: a ``/v1/completions`` request's answers, each prompt's
    choices in the prompts' order (choice ``i * n + j`` is prompt ``i``'s ``j``-th answer)."""

    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
    object: str = "text_completion"


class OutputText(Struct, kw_only=True):
    text: str
    annotations: list = []
    type: str = "output_text"


class OutputMessage(Struct, kw_only=True):
    id: str
    content: list[OutputText]
    status: str  # "completed", or "incomplete" (cut at max_output_tokens)
    role: str = "assistant"
    type: str = "message"


class InputTokensDetails(Struct):
    cached_tokens: int
    cache_write_tokens: int = 0  # (OpenAI's prompt-cache writes, billed apart: not a notion here)


class OutputTokensDetails(Struct):
    reasoning_tokens: int = 0


class ResponseUsage(Struct, kw_only=True):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class IncompleteDetails(Struct):
    reason: str


class ResponseObject(Struct, kw_only=True):
    """OpenAI's ``response`` (the Responses API): the answer as ``output[0]``, a message whose
    ``content[0]`` is the ``output_text``; ``status`` ``incomplete`` where it stopped at
    ``max_output_tokens``."""

    id: str
    created_at: int
    model: str
    status: str
    output: list[OutputMessage]
    usage: ResponseUsage
    incomplete_details: IncompleteDetails | None = None
    error: None = None
    parallel_tool_calls: bool = False
    tool_choice: str = "none"
    tools: list = []
    object: str = "response"


class Embedding(Struct, kw_only=True):
    embedding: list[float]
    index: int = 0
    object: str = "embedding"


class PromptUsage(Struct):
    """An embeddings or rerank answer's usage, which counts prompt tokens only."""

    prompt_tokens: int
    total_tokens: int


class EmbeddingList(Struct, kw_only=True):
    """OpenAI's response to an embeddings request (``CreateEmbeddingResponse``)."""

    data: list[Embedding]
    model: str
    usage: PromptUsage
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


class RerankResponse(Struct, kw_only=True):
    """vLLM's ``RerankResponse``: the documents by score, highest first."""

    id: str
    model: str
    usage: PromptUsage
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
    """A failed request's ``error``, OpenAI's object: ``code``, the kind of failure (a row's:
    ``input``, ``output``, ``engine``, ``worker``; a request the batch did not run:
    ``batch_expired``, ``batch_cancelled``), and ``message``, the whole reason as the row's
    ``error`` column gives it (``input: messages is missing``)."""

    code: str
    message: str

    @classmethod
    def of(cls, error: str) -> "LineError":
        """A row's error text as the object: its kind (the text before the first colon) as the code."""
        kind, sep, _ = error.partition(":")
        return cls(code=kind if sep and kind.isidentifier() else "error", message=error)


class Envelope(Struct, kw_only=True):
    """An output line's ``response``. Its ``body``: a ``ChatCompletion``, ``Completion``, ``EmbeddingList``,
    ``ScoreResponse``, ``RerankResponse`` or ``ErrorBody`` when written; a plain dict when read
    back (``decode``: the bodies share no tag msgspec could tell them apart by)."""

    status_code: int
    request_id: str
    body: Any = None


class OutputLine(Struct, kw_only=True):
    """An output (or error file) line: ``{"id", "custom_id", "response", "error"}``. A row that
    failed has ``response.body`` null and the reason in ``error`` (``{"code", "message"}``); the
    service's error file moves it into ``response.body.error`` (pipeline/service/result_files.py)."""

    id: str
    custom_id: Any
    response: Envelope | None
    error: LineError | None = None


_encoder = msgspec.json.Encoder()


def encode(line: OutputLine) -> str:
    """A line as JSON text (UTF-8, not escaped; no newline)."""
    return _encoder.encode(line).decode("utf-8")


def decode(text: str | bytes) -> OutputLine:
    """An output line written by ``encode`` (its body as a plain dict)."""
    return msgspec.json.decode(text, type=OutputLine)
