"""A prompt template's pieces joined column-wise with Arrow compute, with the same texts and checks
``PromptTemplate.split`` gives row by row. A prefix that is one column, a document, is coded by its distinct values,
so each document is checked and joined once."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.data.row_checks import RowColumns
from pipeline.data.text_arrays import only_on, packed
from pipeline.prefix_memory import digest_codes, value_bounds
from pipeline.results import ErrorKind
from pipeline.sampling import ROW_COLUMNS, SamplingError, checked
from tasks import PromptTemplate, RowError


def whole(column: pa.ChunkedArray) -> pa.Array:
    """``column`` as one array, without copying a lone chunk as ``combine_chunks`` would."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def plain_text(table: pa.Table, task: PromptTemplate) -> bool:
    """Whether every column the template reads is valid UTF-8 text."""
    for name in set(task.fields):
        column = table.column(name)
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            return False
        try:
            column.validate(full=True)
        except pa.ArrowInvalid:
            return False
    return True


def joined_columns(task: PromptTemplate, table: pa.Table) -> tuple[pa.Array, pa.Array, pa.Array, np.ndarray | None]:
    """Prefix, suffix and error joined column-wise; the first field that fails names the error. A one-field prefix
    comes back as a dictionary array with each value's digest; otherwise the digests are None."""
    n = table.num_rows
    fields = FieldValues(task, table)
    values, codes, first = fields.values, fields.codes, fields.first
    error = fields.error()
    if codes is not None:  # each distinct document is copied once; the rest are views
        assert first is not None
        only_first = only_on(values[0], first)  # each distinct document on its first row only
        prefix = pa.DictionaryArray.from_arrays(codes, packed(joined(task.prefix_pieces, [only_first], n), first))
    else:
        prefix = joined(task.prefix_pieces, values[: fields.cut], n)
    suffix = joined(task.suffix_pieces, values[fields.cut :], n)
    return prefix, suffix, error, fields.digests


def field_texts(task: PromptTemplate, table: pa.Table) -> list[pa.Array]:
    """The template's fields as large_string views of the text."""
    return [whole(table.column(f)).cast(pa.large_string()) for f in task.fields]


class FieldValues:
    """The template's fields as large_string columns, and where the prefix is one field, each row's document code;
    else ``codes`` is None."""

    def __init__(self, task: PromptTemplate, table: pa.Table):
        self.task, self.cut, self.rows = task, len(task.prefix_pieces) - 1, table.num_rows
        self.values = field_texts(task, table)
        self.codes = self.digests = self.first = None
        if self.cut == 1:  # the digest tells the documents apart
            head, tail = task.prefix_pieces
            self.codes, self.digests, self.first = digest_codes(self.values[0], head, tail)

    def error(self) -> pa.Array:
        """Each row's error, null where fine; the first field that fails names it."""
        task, codes = self.task, self.codes
        error = pa.nulls(self.rows, pa.string())
        for i, (field, value) in enumerate(zip(task.fields, self.values)):
            coded = i == 0 and codes is not None
            reason = pc.if_else(
                pc.is_null(codes if coded else value), pa.scalar(f"{ErrorKind.INPUT}: {field} is null"), None
            )
            if task.strict_text:  # a document is checked once, on its first row
                empty = (
                    blank(only_on(value, self.first)).take(pa.array(self.first)).take(codes)
                    if coded and self.first is not None
                    else blank(value)
                )
                reason = pc.coalesce(
                    reason,
                    pc.if_else(pc.fill_null(empty, False), pa.scalar(f"{ErrorKind.INPUT}: {field} is empty"), None),
                )
            error = pc.coalesce(error, reason)
        return error.cast(pa.string())

    def suffix_bytes(self) -> np.ndarray:
        """Each row's suffix length in UTF-8 bytes, as ``joined`` would make it."""
        total = np.full(self.rows, utf8_bytes(self.task.suffix_pieces), np.int64)
        for value in self.values[self.cut :]:
            total += pc.fill_null(pc.binary_length(value), 0).to_numpy(zero_copy_only=False)
        return total

    def prefix_bytes(self) -> np.ndarray:
        """Each code's prefix length in UTF-8 bytes, template pieces included."""
        assert self.first is not None
        bounds = value_bounds(self.values[0])
        return bounds[self.first + 1] - bounds[self.first] + utf8_bytes(self.task.prefix_pieces)


def utf8_bytes(pieces: list[str]) -> int:
    return sum(len(p.encode("utf-8", "surrogatepass")) for p in pieces)


def blank(value: pa.Array) -> pa.Array:
    # binary_length reads only the offsets; utf8_length would read the text
    return pc.or_(pc.equal(pc.binary_length(value), 0), pc.utf8_is_space(value))


def joined(pieces: list[str], values: list[pa.Array], n: int) -> pa.Array:
    parts: list = [pa.scalar(pieces[0], pa.large_string())]
    for value, piece in zip(values, pieces[1:]):
        parts += [value, pa.scalar(piece, pa.large_string())]
    if not values:
        return pa.array([pieces[0]] * n, pa.large_string())
    return pc.binary_join_element_wise(*parts, pa.scalar("", pa.large_string()))


def row_by_row(columns: RowColumns, task, table: pa.Table) -> tuple[pa.Array, pa.Array, pa.Array]:
    """The task's own split, row by row (as the client-side path does it)."""
    prefixes, suffixes, errors = [], [], []
    for batch in table.to_batches():
        rows, bad = columns.task_rows(batch)
        for row, reason in zip(rows, bad):
            prefix = suffix = error = None
            if row is None:
                error = f"{ErrorKind.INPUT}: {reason}"
            else:
                try:
                    parts = task.split(row)
                    if columns.sampling_columns:
                        checked({k: row.get(k) for k in ROW_COLUMNS if k in row})
                    prefix, suffix = parts.prefix, parts.suffix
                except (RowError, SamplingError) as exc:
                    error = f"{ErrorKind.INPUT}: {exc}"
            prefixes.append(prefix)
            suffixes.append(suffix)
            errors.append(error)
    return pa.array(prefixes, pa.large_string()), pa.array(suffixes, pa.large_string()), pa.array(errors, pa.string())
