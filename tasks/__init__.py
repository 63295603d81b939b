"""Task kinds: how an input row becomes a prompt, and which part of it is shareable.

A task kind turns a row into ``PromptParts(prefix, suffix)``: the prefix is the part
many rows share (the document, after the chat template's system part) and is what
the placement and the KV cache key on; the suffix is the row's own part.

Kinds: ``document_question`` (the default), ``template`` (the config's prompt template),
``generate`` (a prompt or messages per row), ``chat`` (OpenAI batch requests), ``embed``
(a text per row, embedded by a pooling model), ``classify`` and ``score`` (labels weighed by the
generation model after the prompt).
"""
from __future__ import annotations

from dataclasses import dataclass

from tasks.base import PromptParts, RowError, TaskKind
from tasks.chat import Chat
from tasks.classify import HEAD_TEMPLATE, SCORE_TEMPLATE, Classify
from tasks.document_question import DocumentQuestion
from tasks.embed import DEFAULT_TEMPLATE as EMBED_TEMPLATE
from tasks.embed import Embed
from tasks.generate import Generate
from tasks.template import PromptTemplate, TemplateError, template_columns

KINDS = ("document_question", "template", "generate", "embed", "classify", "score")


def get_task_kind(config, tokenizer) -> TaskKind:
    """The task kind ``config.task`` names, with the config's prompt settings."""
    p = config.prompt
    if config.task == "document_question":
        return DocumentQuestion(tokenizer, system=p.system)
    if config.task == "template":
        return PromptTemplate(tokenizer, p.template, system=p.system, prefix_column=p.prefix_column,
                              chat_template=p.chat_template)
    if config.task == "generate":
        return Generate(tokenizer, system=p.system, chat_template=p.chat_template)
    if config.task == "embed":
        return Embed(tokenizer, p.template, prefix_column=p.prefix_column)
    if config.task in ("classify", "score"):
        from pipeline.model import classifier_labels, model_folder

        return Classify(tokenizer, p.template, p.labels, score=config.task == "score", system=p.system,
                        prefix_column=p.prefix_column, chat_template=p.chat_template,
                        head=classifier_labels(model_folder(config)))
    raise ValueError(f"unknown task kind {config.task!r}; known: {', '.join(KINDS)}")


@dataclass(frozen=True)
class Columns:
    """The input columns a task reads: all of ``required``, at least one of ``one_of``, and
    ``optional`` ones when present. ``text``: those read as text."""
    required: tuple[str, ...] = ()
    one_of: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    lists: tuple[str, ...] = ()   # read as lists (chat messages)
    writes: tuple[str, ...] = ()  # the result columns the task writes (an input column of one of these names is
                                  # not copied)

    @property
    def all(self) -> tuple[str, ...]:
        return self.required + self.one_of + self.optional

    def missing(self, names) -> str | None:
        """Why an input with these column names cannot run, or None."""
        lacking = [c for c in self.required if c not in names]
        if lacking:
            return f"lacks required column(s) {', '.join(lacking)}"
        if self.one_of and not any(c in names for c in self.one_of):
            return f"has none of the columns {' or '.join(self.one_of)}"
        return None


def task_columns(config) -> Columns:
    """The columns ``config``'s task reads (no tokenizer needed: checked before engines start), and
    those it writes."""
    from pipeline.results import written_fields

    writes = written_fields(config.task)
    if config.task in ("template", "embed", "classify", "score"):
        default = SCORE_TEMPLATE if config.task == "score" else EMBED_TEMPLATE
        if config.task in ("classify", "score") and config.prompt.template is None:
            from pipeline.model import classifier_labels, model_folder

            default = HEAD_TEMPLATE if classifier_labels(model_folder(config)) else default
        return Columns(required=tuple(template_columns(config.prompt.template or default)), writes=writes)
    if config.task == "generate":
        return Columns(one_of=("prompt", "messages"), optional=("prefix",), lists=("messages",), writes=writes)
    return Columns(required=("document", "question"), writes=writes)


__all__ = ["PromptParts", "RowError", "TaskKind", "DocumentQuestion", "Chat", "Generate", "Embed", "Classify",
           "PromptTemplate", "TemplateError", "KINDS", "get_task_kind", "Columns", "task_columns"]
