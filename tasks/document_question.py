"""Document-question: a fixed prompt template with the document first and the question last. The
prefix ends after the document's closing blank line, so it is the same for every question on it."""

from __future__ import annotations

from tasks.template import PromptTemplate

INSTRUCTION = "Read the document, then answer the question with a short answer taken from the document."
TEMPLATE = INSTRUCTION + "\n\nDocument:\n{document}\n\nQuestion: {question}"


class DocumentQuestion(PromptTemplate):
    name = "document_question"

    def __init__(self, tokenizer, system: str | None = None):
        super().__init__(tokenizer, TEMPLATE, system=system, prefix_column="document", strict_text=True)
