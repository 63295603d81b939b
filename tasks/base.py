from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol


@dataclass(frozen=True)
class PromptParts:
    prefix: str  # shared part: rendered chat-template text up to and including the document
    suffix: str  # the row's own part, ending with the assistant turn's header


class RowError(ValueError):
    """A row that cannot become a prompt; the message goes to the row's ``error`` column."""


class TaskKind(Protocol):
    name: str
    required_columns: tuple[str, ...]

    def split(self, row: Mapping[str, Any]) -> PromptParts: ...
