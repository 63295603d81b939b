"""Generate: rows that are just prompts, as a ``prompt`` or an OpenAI-style ``messages`` list.

An optional ``prefix`` column holds text many rows share, such as a document. It goes first in the
user message, so rows with the same prefix land on the shard that holds it."""

from __future__ import annotations

from typing import Any, Mapping

from tasks.base import PromptParts, RowError
from tasks.chat import Chat
from tasks.template import PromptTemplate

PROMPT, PREFIX, MESSAGES = "prompt", "prefix", "messages"


class Generate:
    name = "generate"
    required_columns: tuple[str, ...] = ()

    def __init__(self, tokenizer, system: str | None = None, chat_template: bool = True):
        self._chat = Chat(tokenizer)
        self._plain = PromptTemplate(tokenizer, "{prompt}", system=system, chat_template=chat_template)
        self._prefixed = PromptTemplate(tokenizer, "{prefix}{prompt}", system=system, chat_template=chat_template)

    def split(self, row: Mapping[str, Any]) -> PromptParts:
        if row.get(MESSAGES) is not None:
            if row.get(PROMPT) is not None:
                raise RowError("row has both prompt and messages; give one")
            return self._chat.split(row)
        if row.get(PROMPT) is None:
            raise RowError("row has neither prompt nor messages")
        return (self._prefixed if row.get(PREFIX) is not None else self._plain).split(row)
