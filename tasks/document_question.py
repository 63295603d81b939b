"""Document-question: the document first (shareable prefix), the question last."""
from __future__ import annotations

from typing import Any, Mapping

from tasks.base import PromptParts, RowError

INSTRUCTION = "Read the document, then answer the question with a short answer taken from the document."
_MARK = "\uE000QUESTION\uE000"  # private-use sentinel, never in real text


class DocumentQuestion:
    name = "document_question"
    required_columns = ("document", "question")

    def __init__(self, tokenizer):
        messages = [{"role": "user", "content": f"{INSTRUCTION}\n\nDocument:\n{{doc}}\n\nQuestion: {_MARK}"}]
        rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        head, sep, tail = rendered.partition(_MARK)
        if not sep or "{doc}" not in head:
            raise ValueError("the model's chat template does not keep the user message intact")
        self._head, doc_tail = head.split("{doc}", 1)
        if doc_tail != "\n\nQuestion: ":
            raise ValueError("the model's chat template alters the user message")
        self._tail = tail

    def split(self, row: Mapping[str, Any]) -> PromptParts:
        doc = _text(row, "document")
        question = _text(row, "question")
        # The prefix ends after the document's closing blank line, so it is identical
        # for every question on the document.
        return PromptParts(prefix=self._head + doc + "\n\n", suffix="Question: " + question + self._tail)


def _text(row: Mapping[str, Any], column: str) -> str:
    value = row.get(column)
    if value is None:
        raise RowError(f"{column} is null")
    if not isinstance(value, str):
        raise RowError(f"{column} is not text (got {type(value).__name__})")
    if not value or value.isspace():   # (no stripped copy of a long document)
        raise RowError(f"{column} is empty")
    return value
