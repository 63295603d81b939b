"""The result of one row, as the client hands it out (``Pipeline.stream``/``run``, jobs)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

RESULT_FIELDS = ("id", "answer", "error", "prompt_tokens", "cached_tokens", "completion_tokens", "shard", "latency_s")


@dataclass
class RowResult:
    index: int            # position of the row in the submitted rows
    id: Any
    answer: str | None
    error: str | None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    shard: str | None = None
    latency_s: float = 0.0

    def as_row(self) -> dict:
        d = asdict(self)
        return {k: d[k] for k in RESULT_FIELDS}
