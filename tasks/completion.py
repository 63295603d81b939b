"""Completion: a raw prompt from a ``/v1/completions`` request, continued without a chat template or system prompt.
A row holds its prompt as the ``prefix`` it may share with other rows and the rest, so rows with
the same prefix land on the shard that holds it."""

from __future__ import annotations

from typing import Any, Mapping

from tasks.base import PromptParts, RowError

PROMPT, PREFIX = "prompt", "prefix"


class Completion:
    name = "completion"
    required_columns: tuple[str, ...] = (PROMPT,)

    def split(self, row: Mapping[str, Any]) -> PromptParts:
        prompt, prefix = row.get(PROMPT), row.get(PREFIX)
        if not isinstance(prompt, str):
            raise RowError("prompt must be text")
        if prefix:
            return PromptParts(prefix=prefix, suffix=prompt)
        if not prompt:
            raise RowError("prompt is empty")
        return PromptParts(prefix=prompt, suffix="")
