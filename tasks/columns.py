"""The input columns a task reads, and the result fields it writes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Columns:
    """All of ``required``, at least one of ``one_of``, and ``optional`` ones when present."""

    required: tuple[str, ...] = ()
    one_of: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    lists: tuple[str, ...] = ()  # read as lists (chat messages)
    writes: tuple[str, ...] = ()  # input columns of these names are not copied to the output

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
