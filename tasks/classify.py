"""Classify and score: the generation model's probability of each label as a row's answer.

The engine reads each label's first-token log-probability in one step, so labels must differ in
their first token. ``score`` answers with the first label's probability; its default template
puts the document first so every query about one document shares its prefill. A classification
model answers from its own head instead, without a chat template, and ``prompt.labels`` may name
some of the head's labels, renormalised over those."""

from __future__ import annotations

import math

from tasks.template import PromptTemplate, TemplateError

SCORE_TEMPLATE = "Document:\n{document}\n\nQuery: {query}\n\nDoes the document answer the query? Answer yes or no."
SCORE_LABELS = ("yes", "no")
HEAD_TEMPLATE = "{text}"  # a classification model's default: the row's text as written


def label_problem(labels, encode) -> str | None:
    """Why ``labels`` cannot be told apart by their first token, or None."""
    if not labels or len(labels) < 2:
        return "give at least two labels"
    first: dict[int, str] = {}
    for label in labels:
        if not isinstance(label, str) or not label.strip():
            return f"label {label!r} is not text"
        ids = encode(label)
        if not len(ids):
            return f"label {label!r} has no tokens"
        other = first.setdefault(ids[0], label)
        if other != label:
            return (
                f"labels {other!r} and {label!r} begin with the same token, and a label is read by its first "
                f"token; use labels that differ at their start"
            )
    return None


def head_probs(probs, head: tuple[str, ...], labels: tuple[str, ...]) -> list[float]:
    """The head's probabilities of ``labels``, renormalised over them."""
    picked = [float(probs[head.index(label)]) for label in labels]
    total = sum(picked) or 1.0
    return [p / total for p in picked]


def head_problem(labels, head: tuple[str, ...]) -> str | None:
    """Why ``labels`` cannot be read from a classification head of labels ``head``, or None."""
    unknown = [label for label in labels if label not in head]
    if unknown:
        return f"the model's labels are {list(head)}; {unknown} are not among them (or leave prompt.labels out)"
    if len(set(labels)) != len(labels) or len(labels) < 2:
        return "give at least two different labels of the model's"
    return None


def label_probs(logprobs: list[float]) -> list[float]:
    """Each label's probability over the labels, from its log-probability over the whole vocabulary."""
    top = max(logprobs)
    weights = [math.exp(lp - top) for lp in logprobs]
    total = sum(weights)
    return [w / total for w in weights]


class Classify(PromptTemplate):
    """With ``score`` the output is the first label's probability instead of the likeliest label."""

    def __init__(
        self,
        tokenizer,
        template: str | None = None,
        labels=None,
        score: bool = False,
        system: str | None = None,
        prefix_column: str | None = None,
        chat_template: bool = True,
        head: tuple[str, ...] | None = None,
    ):
        self.name = "score" if score else "classify"
        if head:  # a classification model's own head weighs its labels
            self.labels = tuple(labels) if labels else tuple(head)
            problem = head_problem(self.labels, tuple(head))
            if problem is not None:
                raise TemplateError(f"task {self.name}: prompt.labels {list(labels)}: {problem}")
            super().__init__(
                tokenizer, template or HEAD_TEMPLATE, prefix_column=prefix_column, chat_template=False, strict_text=True
            )
            return
        if template is None and not score:
            raise TemplateError(
                "task classify needs prompt.template (the row's text and the question to classify "
                'it by, e.g. "Review: {text}\\n\\nIs this review positive or negative?")'
            )
        self.labels = tuple(labels) if labels else (SCORE_LABELS if score else ())
        problem = label_problem(self.labels, lambda text: tokenizer.encode(text, add_special_tokens=False))
        if problem is not None:
            raise TemplateError(f"task {self.name}: prompt.labels {list(self.labels)}: {problem}")
        super().__init__(
            tokenizer,
            template or SCORE_TEMPLATE,
            system=system,
            prefix_column=prefix_column,
            chat_template=chat_template,
            strict_text=True,
        )
