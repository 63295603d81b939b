"""Embed: each row's text becomes one embedding (a pooling model's, e.g. all-MiniLM-L6-v2).

The text is the row's ``document`` column, or the config's prompt template filled in (e.g.
``"query: {text}"``), sent as written (no chat template); the engine adds the model's own special
tokens. Rows with the same text share a placement, as documents do.
"""
from __future__ import annotations

from tasks.template import PromptTemplate

DEFAULT_TEMPLATE = "{document}"


class Embed(PromptTemplate):
    name = "embed"

    def __init__(self, tokenizer, template: str | None = None, prefix_column: str | None = None):
        # the whole text is the "prefix" (what the placement keys on); nothing follows it
        super().__init__(tokenizer, template or DEFAULT_TEMPLATE, prefix_column=prefix_column, chat_template=False,
                         strict_text=True)
