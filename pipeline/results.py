"""The result of one row, as ``Pipeline.stream`` and ``run`` yield it and a job's output stores it.
Workers return answers keyed by position; the client fills in ids and extra columns."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import msgspec

from tasks.registry import spec_or_generate

RESULT_FIELDS = (
    "id",
    "answer",
    "error",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "shard",
    "latency_s",
    "finish_reason",
    "answer_json",
    "logprobs",
    "choices",
    "embedding",
    "label",
    "label_probs",
    "score",
)
# Written only by jobs whose sampling settings or row columns ask for them.
JSON_FIELD = "answer_json"
ASKED_FOR = {JSON_FIELD: ("json_schema",), "logprobs": ("logprobs", "top_logprobs"), "choices": ("n",)}


def written_fields(task: str | None) -> tuple[str, ...]:
    """The result columns a job of ``task`` may write; input columns of these names are not copied."""
    return spec_or_generate(task).writes


def output_fields(sampling, row_columns=(), task: str | None = None) -> list[str]:
    """The result columns a job's output has. For a task that answers in text, the optional ones
    appear only when the job's sampling or its rows' sampling columns ask for them."""
    kind = spec_or_generate(task)
    if not kind.answers:
        return list(kind.writes)
    asked = {
        JSON_FIELD: sampling.json_schema is not None,
        "logprobs": sampling.keeps_logprobs,
        "choices": sampling.choices > 1,
    }
    return [
        n
        for n in written_fields(task)
        if (n not in ASKED_FOR or asked[n] or any(c in row_columns for c in ASKED_FOR[n]))
    ]


class ErrorKind(StrEnum):
    """Why a row has no answer; its error text starts with it, as in ``input: prompt too long``."""

    INPUT = "input"  # the row itself: a bad or missing field, a prompt too long -- fix the row
    ENGINE = "engine"  # the engine raised on this request
    WORKER = "worker"  # the row's worker failed it ``recovery.max_row_attempts`` times
    OUTPUT = "output"  # the answer is not what was asked for (JSON that does not parse or match)

    @classmethod
    def of(cls, error: str) -> "ErrorKind | None":
        """The kind an error text starts with (``"<kind>: ..."``), or None."""
        kind = error.split(":", 1)[0]
        return cls(kind) if kind in cls._value2member_map_ else None


class RowResult(msgspec.Struct, array_like=True, gc=False):
    index: int  # position of the row in the submitted rows
    id: Any = None
    answer: str | None = None
    error: str | None = None  # "<kind>: <what happened>"
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    shard: str | None = None
    latency_s: float = 0.0
    error_kind: ErrorKind | None = None
    finish_reason: str | None = None  # "stop", or "length" where it reached max_tokens
    answer_json: str | None = None  # a JSON answer checked against its schema, as compact JSON
    # the answer's tokens' log-probabilities: [{"token", "logprob", "top_logprobs": [{"token", "logprob"}]}]
    logprobs: list | None = None
    # every answer when sampling.n asked for several, each with the row's answer fields; the row's are the first's
    choices: list | None = None
    embedding: Any = None  # task embed: the text's embedding (float32 values)
    label: str | None = None  # task classify: the likeliest label
    label_probs: list | None = None  # task classify: each label's probability, in the labels' order
    score: float | None = None  # task score: the first label's probability

    @property
    def parsed(self) -> Any:
        """A JSON answer as Python values (None when none was asked for or it failed)."""
        import json

        return None if self.answer_json is None else json.loads(self.answer_json)

    @classmethod
    def failed(cls, index: int, kind: ErrorKind, message: str, **fields) -> "RowResult":
        """A row answered with an error of ``kind``; ``message`` says why."""
        result = cls(index, **fields)
        result.fail(kind, message)
        return result

    def fail(self, kind: ErrorKind, message: str) -> None:
        """The row has an error of ``kind`` after all; users read ``"<kind>: <message>"``."""
        self.error, self.error_kind = f"{kind}: {message}", kind

    @property
    def error_group(self) -> str | None:
        """The row's error without its particulars, for counting rows by error: ``input: prompt too
        long``, or an engine error's exception type."""
        if self.error is None:
            return None
        kind = self.error_kind
        why = self.error.removeprefix(f"{kind}: ") if kind is not None else self.error
        why = why.split(" (", 1)[0]
        why = why.split(":", 1)[0] if kind is ErrorKind.ENGINE else why.split(";", 1)[0]
        return f"{kind}: {why}" if kind is not None else why
