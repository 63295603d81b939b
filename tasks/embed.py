"""Embed: each row's text becomes one embedding from a pooling model.

The text is the row's ``document`` or the config's template filled in, sent without a chat
template. Rows with the same text share a placement, as documents do."""

from __future__ import annotations

from tasks.template import PromptTemplate

DEFAULT_TEMPLATE = "{document}"


class Embed(PromptTemplate):
    name = "embed"
    embeds = True  # its rows are texts to embed, not prompts to answer

    def __init__(self, tokenizer, template: str | None = None, prefix_column: str | None = None):
        # The prefix column only keys the placement; the engine embeds the whole text.
        super().__init__(
            tokenizer, template or DEFAULT_TEMPLATE, prefix_column=prefix_column, chat_template=False, strict_text=True
        )
