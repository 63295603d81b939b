"""Task kinds: how an input row becomes a prompt, and which part of it is shareable.

A task kind turns a row into ``PromptParts(prefix, suffix)``: the prefix is the part
many rows share (the document, after the chat template's system part) and is what
the router and the KV cache key on; the suffix is the row's own part.
"""
from tasks.base import PromptParts, RowError, TaskKind
from tasks.chat import Chat
from tasks.document_question import DocumentQuestion

KINDS = {DocumentQuestion.name: DocumentQuestion, Chat.name: Chat}


def get_task_kind(name: str, tokenizer) -> TaskKind:
    try:
        return KINDS[name](tokenizer)
    except KeyError:
        raise ValueError(f"unknown task kind {name!r}; known: {', '.join(sorted(KINDS))}") from None


__all__ = ["PromptParts", "RowError", "TaskKind", "DocumentQuestion", "Chat", "KINDS", "get_task_kind"]
