"""Prompt templates: a user message naming input columns, rendered through the chat template.

The template is rendered once with markers in place of the columns, so each row only fills in
values. The shareable prefix runs through the value of ``prefix_column``, by default the first
column named, so put what many rows share first and what varies per row last."""

from __future__ import annotations

import string
from typing import Any, Mapping

from tasks.base import PromptParts, RowError

_MARK = "\ue000FIELD{}\ue000"  # private-use sentinel, never in real text


class TemplateError(ValueError):
    """A template that cannot be used; the message says why."""


def template_columns(template: str) -> list[str]:
    """The columns a template names, in order of first use; TemplateError unless they are plain names."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise TemplateError(f"prompt template is not valid ({exc}); write literal braces as {{{{ and }}}}") from None
    columns: list[str] = []
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if not field or not field.isidentifier():
            raise TemplateError(
                f"prompt template field {{{field}}} is not a column name (a name of letters, digits and underscores)"
            )
        if spec or conversion:
            raise TemplateError(
                f"prompt template field {{{field}}} has a format spec or conversion; "
                f"only plain {{column}} fields are supported"
            )
        if field not in columns:
            columns.append(field)
    if not columns:
        raise TemplateError(
            "prompt template names no input column (e.g. {document}); every row would get the same prompt"
        )
    return columns


class PromptTemplate:
    name = "template"

    def __init__(
        self,
        tokenizer,
        template: str,
        system: str | None = None,
        prefix_column: str | None = None,
        chat_template: bool = True,
        strict_text: bool = False,
    ):
        self.template = template
        self.required_columns = tuple(template_columns(template))
        self.prefix_column = prefix_column or self.required_columns[0]
        if self.prefix_column not in self.required_columns:
            raise TemplateError(
                f"prefix column {self.prefix_column!r} is not in the prompt template, which "
                f"names {', '.join(self.required_columns)}"
            )
        # Strict: values must be non-empty text. Otherwise numbers become text and empty text is kept.
        self.strict_text = strict_text
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
        marked = template.replace("\ue000", "")  # a template holding a marker could not be split
        marked = marked.format_map(_Marks())
        if chat_template:
            messages = ([{"role": "system", "content": system}] if system else []) + [
                {"role": "user", "content": marked}
            ]
            rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        else:
            rendered = (system + "\n\n" if system else "") + marked
        # rendered = pieces[0] + value(fields[0]) + pieces[1] + ... + pieces[n]
        pieces, rest = [], rendered
        for i in range(len(fields)):
            head, sep, rest = rest.partition(_MARK.format(i))
            if not sep:
                raise TemplateError(
                    "the model's chat template does not keep the user message intact, "
                    "so the prompt template cannot be applied to it"
                )
            pieces.append(head)
        pieces.append(rest)
        # prompt = prefix_pieces[0] + value(fields[0]) + ... + suffix_pieces[-1], for whole tables
        self.fields = fields
        # The prefix ends after the prefix column's first use and the whitespace that follows it.
        cut = fields.index(self.prefix_column) + 1
        tail = pieces[cut]
        keep = len(tail) - len(tail.lstrip())
        self.prefix_pieces = pieces[:cut] + [tail[:keep]]
        self.suffix_pieces = [tail[keep:]] + pieces[cut + 1 :]

    def split(self, row: Mapping[str, Any]) -> PromptParts:
        values = [self._value(row, f) for f in self.fields]
        cut = len(self.prefix_pieces) - 1
        return PromptParts(
            prefix=_join(self.prefix_pieces, values[:cut]), suffix=_join(self.suffix_pieces, values[cut:])
        )

    def _value(self, row: Mapping[str, Any], column: str) -> str:
        if column not in row:
            raise RowError(f"column {column} is missing (the prompt template names {', '.join(self.required_columns)})")
        value = row[column]
        if value is None:
            raise RowError(f"{column} is null")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not self.strict_text:
            return str(value)
        if not isinstance(value, str):
            raise RowError(f"{column} is not text (got {type(value).__name__})")
        if self.strict_text and (not value or value.isspace()):  # (no stripped copy of a long document)
            raise RowError(f"{column} is empty")
        return value


class _Marks(dict):
    """For ``str.format_map``: the i-th field used becomes the i-th marker."""

    def __init__(self):
        super().__init__()
        self._n = 0

    def __missing__(self, key: str) -> str:
        mark = _MARK.format(self._n)
        self._n += 1
        return mark


def _join(pieces: list[str], values: list[str]) -> str:
    out = [pieces[0]]
    for value, piece in zip(values, pieces[1:]):
        out.append(value)
        out.append(piece)
    return "".join(out)
