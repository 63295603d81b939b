"""Text columns as Python values. pyarrow reads Parquet strings without checking their UTF-8, and one invalid value
fails the whole batch's conversion; here only the bad rows fail."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from pipeline.sampling import REQUEST_COLUMNS, ROW_COLUMNS


def text_values(column: pa.Array, name: str) -> tuple[list, list[str | None]]:
    """A value per row and, per row, None or why the row fails; the caller gives the error its kind."""
    n = len(column)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        try:
            column.validate(full=True)
            return column.to_pylist(), [None] * n
        except pa.ArrowInvalid:
            column = column.view(pa.large_binary() if pa.types.is_large_string(column.type) else pa.binary())
    if not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        return column.to_pylist(), [None] * n  # the task reports non-text values
    values: list = []
    errors: list[str | None] = []
    for raw in column.to_pylist():
        try:
            values.append(None if raw is None else raw.decode("utf-8"))
            errors.append(None)
        except UnicodeDecodeError as exc:
            values.append(None)
            errors.append(f"{name} is not valid UTF-8 text (byte {exc.start})")
    return values, errors


@dataclass(frozen=True)
class RowColumns:
    """The input columns a task reads: texts checked for UTF-8, lists, then the rows' own sampling settings."""

    text_columns: tuple[str, ...]
    list_columns: tuple[str, ...]
    sampling_columns: tuple[str, ...]

    @classmethod
    def of(cls, columns, names) -> "RowColumns":
        """``columns`` are the task's, ``names`` the input's."""
        names = list(names)
        return cls(
            tuple(c for c in columns.all if c in names and c not in columns.lists),
            tuple(c for c in columns.lists if c in names),
            tuple(c for c in ROW_COLUMNS if c in names and c not in columns.all and c not in REQUEST_COLUMNS),
        )

    @property
    def all(self) -> list[str]:
        return [*self.text_columns, *self.list_columns, *self.sampling_columns]

    def task_rows(self, batch: pa.RecordBatch) -> tuple[list[dict | None], list[str | None]]:
        """The task's rows from ``batch``, None for a row that fails a check here, and why those failed."""
        values = []
        errors: list[str | None] = [None] * batch.num_rows
        for name in self.text_columns:
            texts, bad = text_values(batch.column(name), name)
            values.append(texts)
            errors = [e or b for e, b in zip(errors, bad)]
        values += [batch.column(name).to_pylist() for name in self.list_columns + self.sampling_columns]
        rows = [None if error else dict(zip(self.all, row)) for row, error in zip(zip(*values), errors)]
        return rows, errors
