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
    embeds = True  # its rows are texts to embed, not prompts to answer

    def __init__(self, tokenizer, template: str | None = None, prefix_column: str | None = None):
        # the placement keys on the text through its prefix column (the whole text, by default);
        # the engine embeds all of it, prefix and suffix
        super().__init__(
            tokenizer, template or DEFAULT_TEMPLATE, prefix_column=prefix_column, chat_template=False, strict_text=True
        )
