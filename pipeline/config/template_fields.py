"""A prompt template's columns (``prompt.template``: plain ``{column}`` fields), read where the
config is checked and by the template task (tasks/template.py)."""
from __future__ import annotations

import string


class TemplateError(ValueError):
    """A template that cannot be used; the message says why."""


def template_columns(template: str) -> list[str]:
    """The columns a template names, in order of first use; :class:`TemplateError` if it is not
    a template of plain column names."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise TemplateError(f"prompt template is not valid ({exc}); write literal braces as {{{{ and }}}}") from None
    columns: list[str] = []
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if not field or not field.isidentifier():
            raise TemplateError(f"prompt template field {{{field}}} is not a column name "
                                f"(a name of letters, digits and underscores)")
        if spec or conversion:
            raise TemplateError(f"prompt template field {{{field}}} has a format spec or conversion; "
                                f"only plain {{column}} fields are supported")
        if field not in columns:
            columns.append(field)
    if not columns:
        raise TemplateError("prompt template names no input column (e.g. {document}); every row would "
                            "get the same prompt")
    return columns
