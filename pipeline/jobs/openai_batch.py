"""Turns answered rows into output lines of the OpenAI batch format, as ``vllm run-batch`` writes them. Ids derive
from the row's position, so a resumed job writes exactly what an uninterrupted one would."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from pipeline.data import completion_lines, scoring_lines
from pipeline.data.chat_tools import AUTO, tool_calls
from pipeline.data.openai_output import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChoiceLogprobs,
    Embedding,
    EmbeddingList,
    Envelope,
    FunctionCall,
    LineError,
    OutputLine,
    PromptTokensDetails,
    PromptUsage,
    TokenLogprob,
    ToolCall,
    TopLogprob,
    Usage,
    encode,
)
from pipeline.data.responses_lines import response_body
from pipeline.data.scoring_lines import SCORING
from pipeline.names import CHAT_URL, COMPLETIONS_URL, EMBEDDINGS_URL, RESPONSES_URL
from pipeline.results import RESULT_FIELDS, RowResult

# Endpoints whose lines fan out into several rows, and how those rows become one line again.
LINES_OF = {SCORING: scoring_lines.lines_of, COMPLETIONS_URL: completion_lines.lines_of}
# The task that answers each endpoint's lines.
ENDPOINT_TASKS = {
    CHAT_URL: "chat",
    COMPLETIONS_URL: "completion",
    RESPONSES_URL: "chat",
    EMBEDDINGS_URL: "embed",
    SCORING: "score",
}


def output_line(
    position: int,
    custom_id,
    result: RowResult,
    model: str,
    max_tokens: int,
    created: int,
    endpoint: str = CHAT_URL,
    tool: str | None = None,
) -> str:
    """One answered row as an output line for ``endpoint``; ``tool`` says how a chat line's tools are answered."""
    request_id = f"pipeline-batch-{position}"
    if result.error is not None:
        return encode(
            OutputLine(
                id=f"pipeline-{position}",
                custom_id=custom_id,
                error=LineError.of(result.error),
                response=Envelope(status_code=400, request_id=request_id),
            )
        )
    body: Any
    if endpoint == EMBEDDINGS_URL:
        body = embedding_body(result, model)
    elif endpoint == RESPONSES_URL:
        body = response_body(position, result, model, created, max_tokens)
    else:
        body = ChatCompletion(
            id=f"chatcmpl-{position}",
            created=created,
            model=model,
            choices=_choices(result, max_tokens, tool, position),
            usage=Usage(
                prompt_tokens=result.prompt_tokens,
                completion_tokens=result.completion_tokens,
                total_tokens=result.prompt_tokens + result.completion_tokens,
                prompt_tokens_details=PromptTokensDetails(result.cached_tokens),
            ),
        )
    return encode(
        OutputLine(
            id=f"pipeline-{position}",
            custom_id=custom_id,
            response=Envelope(status_code=200, request_id=request_id, body=body),
        )
    )


def embedding_body(result: RowResult, model: str) -> EmbeddingList:
    """OpenAI's response to an embeddings request of one input."""
    return EmbeddingList(
        data=[Embedding(embedding=list(result.embedding))],
        model=model,
        usage=PromptUsage(result.prompt_tokens, result.prompt_tokens),
    )


def _choices(result: RowResult, max_tokens: int, tool: str | None, position: int) -> list[ChatChoice]:
    """The response's choices, one per answer the row asked for; a tool line's answers become tool calls."""
    answers = result.choices or [
        {
            "answer": result.answer,
            "finish_reason": result.finish_reason,
            "completion_tokens": result.completion_tokens,
            "logprobs": result.logprobs,
            "answer_json": result.answer_json,
        }
    ]
    return [
        ChatChoice(
            index=i,
            message=_message(a, tool, f"{position}_{i}"),
            # Without the engine's reason, an answer that used max_tokens stopped for length.
            finish_reason="tool_calls"
            if tool and a.get("answer_json")
            else a["finish_reason"] or ("length" if a["completion_tokens"] >= max_tokens else "stop"),
            logprobs=None if a.get("logprobs") is None else ChoiceLogprobs([_token(t) for t in a["logprobs"]]),
        )
        for i, a in enumerate(answers)
    ]


def _message(answer: dict, tool: str | None, prefix: str) -> AssistantMessage:
    """The answer as text, or as its tool calls: a "required" or named-function answer is the calls
    alone; an "auto" answer keeps what it says beside them (null where nothing)."""
    if tool is None or answer.get("answer_json") is None:
        return AssistantMessage(content=answer["answer"], role="assistant")
    calls = [
        ToolCall(id=i, function=FunctionCall(name, arguments))
        for i, name, arguments in tool_calls(answer["answer_json"], tool, prefix)
    ]
    content = (answer["answer"] or None) if tool == AUTO else None
    return AssistantMessage(content=content, role="assistant", tool_calls=calls)


def _utf8(token: str) -> list[int]:
    return list(token.encode("utf-8", "surrogatepass"))


def _token(t: dict) -> TokenLogprob:
    return TokenLogprob(
        t["token"],
        t["logprob"],
        _utf8(t["token"]),
        [TopLogprob(x["token"], x["logprob"], _utf8(x["token"])) for x in t["top_logprobs"]],
    )


@dataclass(frozen=True)
class ResponseLines:
    """Turns a cluster job's merged rows into output lines; their ``id`` holds each custom_id as JSON text."""

    model: str
    max_tokens: int
    created: int
    endpoint: str = CHAT_URL  # ``SCORING`` for scoring requests

    @property
    def embeds(self) -> bool:
        return self.endpoint == EMBEDDINGS_URL

    @property
    def fans_out(self) -> bool:
        """Whether each line is answered as several rows that make one line again."""
        return self.endpoint in LINES_OF

    def of(self, table: pa.Table, first: int) -> str:
        """``table``'s rows as lines, the first at input position ``first``."""
        fields = [n for n in RESULT_FIELDS[1:] if n in table.column_names]
        if self.fans_out:
            return LINES_OF[self.endpoint](
                table.select(["id", *fields]).to_pylist(), first, self.model, self.created, self.max_tokens
            )
        out = []
        for k, row in enumerate(table.select(["id", *fields]).to_pylist()):
            result = RowResult(first + k, **{n: row[n] for n in fields})
            carry = json.loads(row["id"])  # a custom_id, or a tool line's {"custom_id", "tool"}
            custom_id, tool = (carry["custom_id"], carry["tool"]) if isinstance(carry, dict) else (carry, None)
            out.append(
                output_line(
                    first + k, custom_id, result, self.model, self.max_tokens, self.created, self.endpoint, tool
                )
                + "\n"
            )
        return "".join(out)
