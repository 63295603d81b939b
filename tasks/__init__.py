"""Task kinds: how an input row becomes a prompt, and which part of it is shareable.

A task kind turns a row into ``PromptParts(prefix, suffix)``: the prefix is the part
many rows share (the document, after the chat template's system part) and is what
the placement and the KV cache key on; the suffix is the row's own part.

Kinds: ``document_question`` (the default), ``template`` (the config's prompt template),
``generate`` (a prompt or messages per row), ``chat`` and ``completion`` (OpenAI batch requests), ``embed``
(a text per row, embedded by a pooling model), ``classify`` and ``score`` (labels weighed by the
generation model after the prompt).
"""

from __future__ import annotations

from tasks.base import PromptParts, RowError, TaskKind
from tasks.chat import Chat
from tasks.classify import Classify
from tasks.columns import Columns
from tasks.completion import Completion
from tasks.document_question import DocumentQuestion
from tasks.embed import Embed
from tasks.generate import Generate
from tasks.registry import CONFIG_TASKS, TASKS, TaskSpec, spec, task_kind
from tasks.template import PromptTemplate, TemplateError, template_columns

KINDS = CONFIG_TASKS


def get_task_kind(config, tokenizer, head: tuple[str, ...] | None = None) -> TaskKind:
    """The task kind ``config.task`` names, with the config's prompt settings; ``head``: a
    classification model's labels (read with the model: ``pipeline.model.head_labels``)."""
    return task_kind(config.task, config.prompt, tokenizer, head)


def task_columns(config, head: tuple[str, ...] | None = None) -> Columns:
    """The columns ``config``'s task reads (no tokenizer needed: checked before engines start), and
    those it writes."""
    return spec(config.task).columns(config.prompt.template, head)


__all__ = [
    "PromptParts",
    "RowError",
    "TaskKind",
    "DocumentQuestion",
    "Chat",
    "Completion",
    "Generate",
    "Embed",
    "Classify",
    "PromptTemplate",
    "TemplateError",
    "KINDS",
    "TASKS",
    "TaskSpec",
    "spec",
    "get_task_kind",
    "Columns",
    "task_columns",
    "template_columns",
]
