"""Generate: rows that are just prompts.

A row has a ``prompt`` (the user message; the config's system prompt goes before it) or a
``messages`` list (OpenAI-style chat, tasks/chat.py). An optional ``prefix`` column holds text
that many rows share (a document, few-shot examples): it goes first in the user message, and the
placement and the KV cache key on it, so rows with the same prefix land on the shard that holds it.
Without a prefix, each distinct prompt is its own group.
"""

from __future__ import annotations

from typing import Any, Mapping

from tasks.base import PromptParts, RowError
from tasks.chat import Chat
from tasks.template import PromptTemplate

PROMPT, PREFIX, MESSAGES = "prompt", "prefix", "messages"


class Generate:
    name = "generate"
    required_columns: tuple[str, ...] = ()
    one_of_columns = (PROMPT, MESSAGES)
    optional_columns = (PREFIX,)

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
