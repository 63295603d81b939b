"""Completion: a raw prompt, as a ``/v1/completions`` request gives it: no chat template and no
system prompt, the model continues the text.

A row holds its prompt in two pieces: ``prefix``, the part it may share with other rows (a
document; pipeline/data/completion_lines.py decides where a line's prompts are cut), and
``prompt``, the rest. Rows with the same prefix land on the shard that holds it, and the engine
prefills it once. A row without a prefix is its own group.
"""

from __future__ import annotations

from typing import Any, Mapping

from tasks.base import PromptParts, RowError

PROMPT, PREFIX = "prompt", "prefix"


class Completion:
    name = "completion"
    required_columns: tuple[str, ...] = (PROMPT,)
    optional_columns = (PREFIX,)

    def split(self, row: Mapping[str, Any]) -> PromptParts:
        prompt, prefix = row.get(PROMPT), row.get(PREFIX)
        if not isinstance(prompt, str):
            raise RowError("prompt must be text")
        if prefix:
            return PromptParts(prefix=prefix, suffix=prompt)
        if not prompt:
            raise RowError("prompt is empty")
        return PromptParts(prefix=prompt, suffix="")
