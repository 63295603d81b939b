"""A prompt template's pieces joined column-wise with Arrow compute (pipeline/steps/prompt_table.py
uses them): for a partition whose template columns are valid text, each row's prefix, suffix and
error made in a few column operations, with the same texts and checks as
``PromptTemplate.split`` gives row by row (``row_by_row``, the path for anything else). A prefix
that is one column (a document) is coded by its distinct values, so each document is checked and
joined once.
"""

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
    """``column`` as one array: its one chunk as it is (``combine_chunks`` copies even that one:
    a document column's text, ~150 MB a partition of the scale input)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def plain_text(table: pa.Table, task: PromptTemplate) -> bool:
    """Every column the template reads is a string column of valid UTF-8."""
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
    """Prefix, suffix and error (null where the row is fine) joined column-wise, with the same
    checks and texts as ``PromptTemplate.split``: the first field that fails names the error.
    A prefix of one field (a document) is dictionary-encoded: each distinct value is checked and
    joined once, and the prefix comes back as a dictionary array, with each dictionary value's
    digest (else None: the prefix is plain text)."""
    n = table.num_rows
    fields = FieldValues(task, table)
    values, codes, first = fields.values, fields.codes, fields.first
    error = fields.error()
    if codes is not None:  # (the join copies each distinct document once; the rest are views)
        assert first is not None  # (made with codes: digest_codes)
        only_first = only_on(values[0], first)  # each distinct document on its first row only
        prefix = pa.DictionaryArray.from_arrays(codes, packed(joined(task.prefix_pieces, [only_first], n), first))
    else:
        prefix = joined(task.prefix_pieces, values[: fields.cut], n)
    suffix = joined(task.suffix_pieces, values[fields.cut :], n)
    return prefix, suffix, error, fields.digests


def field_texts(task: PromptTemplate, table: pa.Table) -> list[pa.Array]:
    """The template's fields of ``table``, in its order, as large_string arrays (views of the text)."""
    return [whole(table.column(f)).cast(pa.large_string()) for f in task.fields]


class FieldValues:
    """The template's fields of ``table`` as large_string columns; where the prefix is one field
    (a document), each row coded by its document (``digest_codes``: codes, each code's digest,
    each code's first row), else ``codes`` is None."""

    def __init__(self, task: PromptTemplate, table: pa.Table):
        self.task, self.cut, self.rows = task, len(task.prefix_pieces) - 1, table.num_rows
        self.values = field_texts(task, table)
        self.codes = self.digests = self.first = None
        if self.cut == 1:  # (each row's prefix digested as read: the digest tells the documents apart)
            head, tail = task.prefix_pieces
            self.codes, self.digests, self.first = digest_codes(self.values[0], head, tail)

    def error(self) -> pa.Array:
        """Each row's error (null where it is fine): the first field that fails names it."""
        task, codes = self.task, self.codes
        error = pa.nulls(self.rows, pa.string())
        for i, (field, value) in enumerate(zip(task.fields, self.values)):
            coded = i == 0 and codes is not None
            reason = pc.if_else(
                pc.is_null(codes if coded else value), pa.scalar(f"{ErrorKind.INPUT}: {field} is null"), None
            )
            if task.strict_text:  # (a document checked once, on its first row)
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
        """Each row's suffix length in UTF-8 bytes, as ``joined`` would make it (0 where a field is null)."""
        total = np.full(self.rows, utf8_bytes(self.task.suffix_pieces), np.int64)
        for value in self.values[self.cut :]:
            total += pc.fill_null(pc.binary_length(value), 0).to_numpy(zero_copy_only=False)
        return total

    def prefix_bytes(self) -> np.ndarray:
        """Each code's prefix length in UTF-8 bytes (template head + document + tail)."""
        assert self.first is not None  # (asked only of a coded prefix: _prompt_index)
        bounds = value_bounds(self.values[0])
        return bounds[self.first + 1] - bounds[self.first] + utf8_bytes(self.task.prefix_pieces)


def utf8_bytes(pieces: list[str]) -> int:
    """The template pieces' length together in UTF-8 bytes."""
    return sum(len(p.encode("utf-8", "surrogatepass")) for p in pieces)


def blank(value: pa.Array) -> pa.Array:
    # (no bytes is no characters: the byte length comes from the offsets, utf8_length reads the text)
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
