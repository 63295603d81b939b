"""Task kinds: how an input row becomes a prompt, and which part of it is shareable.

A kind turns a row into ``PromptParts(prefix, suffix)``. The prefix is the part many rows share,
such as the document, and is what the placement and the KV cache key on; the suffix is the row's
own part."""

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
    """The task kind ``config.task`` names; ``head`` is a classification model's labels, if any."""
    return task_kind(config.task, config.prompt, tokenizer, head)


def task_columns(config, head: tuple[str, ...] | None = None) -> Columns:
    """The columns ``config``'s task reads and writes, known without a tokenizer, before engines start."""
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
