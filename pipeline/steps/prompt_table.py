"""Turns one input partition into prompt rows on a worker, with Arrow compute rather than row by row.

A prompt template over valid text is joined column-wise; anything else takes the task's own per-row path, so every
row gets exactly the prompt or error the client-side path gives. Each distinct prefix is digested once.

A document's prefix text rides on its first row only, so a row costs its suffix, not its document, on the way to its
shard. A file job's read may keep no text at all; the split then reads the partition again with
``PartitionTexts``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from dask.sizeof import sizeof

from pipeline.data.errors import JobError
from pipeline.data.partitions import Partition
from pipeline.data.row_checks import RowColumns
from pipeline.data.text_arrays import on_first_rows
from pipeline.prefix_memory import digest_codes, text_digests
from pipeline.results import ErrorKind
from pipeline.sampling import ROW_COLUMNS, SamplingError, checked
from pipeline.steps.adapter_keys import adapter_digests
from pipeline.steps.template_pieces import (
    FieldValues,
    field_texts,
    joined,
    joined_columns,
    plain_text,
    row_by_row,
    whole,
)
from tasks import PromptTemplate, RowError

ROWS_SCHEMA = pa.schema(
    {"position": pa.int64(), "digest": pa.uint64(), "prefix": pa.large_string(), "suffix": pa.large_string()}
)
DOCUMENTS_SCHEMA = pa.schema(
    {
        "digest": pa.uint64(),
        "rows": pa.int64(),
        "prefix_bytes": pa.int64(),
        "suffix_bytes": pa.int64(),
        "first": pa.int64(),
        "adapter": pa.uint64(),
    }
)
ERRORS_SCHEMA = pa.schema({"position": pa.int64(), "error": pa.string()})
INDEX_SCHEMA = pa.schema({"position": pa.int64(), "digest": pa.uint64()})


@dataclass
class PromptRows:
    rows: pa.Table
    documents: pa.Table
    errors: pa.Table
    read: int | None = None  # JSONL: rows read, earlier answers included
    texts: bool = True  # False: ``rows`` holds position and digest only


@sizeof.register(PromptRows)
def _sizeof_prompt_rows(rows: PromptRows) -> int:
    """Dask spills a worker's memory by this size."""
    return rows.rows.nbytes + rows.documents.nbytes + rows.errors.nbytes


def read_partition(source, part: Partition, columns: list[str] | None = None) -> pa.Table:
    if columns is None:
        columns = source.row_columns.all
    path = source.files[part.file]
    try:
        table = pq.ParquetFile(path, filesystem=source.fs).read_row_groups(list(part.row_groups), columns=columns)
    except (pa.ArrowException, OSError) as exc:
        raise JobError(
            f"cannot read {path}: {' '.join(str(exc).split())}. The rows of its other partitions are "
            f"answered and kept; fix or replace the file and run the same command again to resume"
        ) from None
    return table.slice(part.skip, part.rows)


def prompt_rows(source, task, part: Partition, done: pa.Array | None = None, texts: bool = True) -> PromptRows:
    """Rows in ``done`` were answered by an earlier run and are left out."""
    table = read_partition(source, part)
    positions = pa.array(np.arange(part.start, part.stop, dtype=np.int64))
    if done is not None and len(done):
        keep = pc.invert(pc.is_in(positions, value_set=done))
        table, positions = table.filter(keep), positions.filter(keep)
    return prompt_rows_of(table, positions, task, source.row_columns, texts)


def prompt_rows_of(table: pa.Table, positions: pa.Array, task, columns: RowColumns, texts: bool = True) -> PromptRows:
    if isinstance(task, PromptTemplate) and not columns.sampling_columns and plain_text(table, task):
        if not texts and len(task.prefix_pieces) == 2:
            return _prompt_index(FieldValues(task, table), positions)
        prefix, suffix, error, digests = joined_columns(task, table)
    else:
        prefix, suffix, error = row_by_row(columns, task, table)
        digests = None
    sampling = {name: whole(table.column(name)) for name in columns.sampling_columns}
    return prompt_rows_from(prefix, suffix, error, positions, sampling, digests)


# The rows' own sampling columns as Arrow types.
SAMPLING_TYPES = {
    "max_tokens": pa.int64(),
    "temperature": pa.float64(),
    "top_p": pa.float64(),
    "top_k": pa.int64(),
    "stop": pa.list_(pa.string()),
    "seed": pa.int64(),
    "json_schema": pa.string(),
    "choice": pa.list_(pa.string()),
    "n": pa.int64(),
    "logprobs": pa.bool_(),
    "top_logprobs": pa.int64(),
    "adapter": pa.string(),
    "tools": pa.string(),
    "tool_parser": pa.string(),
}
assert tuple(SAMPLING_TYPES) == ROW_COLUMNS


def prompt_rows_of_dicts(
    rows: list[tuple[dict | None, str | None]], positions: pa.Array, task, all_sampling: bool = False
) -> PromptRows:
    """Prompt rows from Python rows, each ``(row, None)`` or ``(None, why it cannot be read)``, split and checked
    row by row. ``all_sampling`` adds the sampling columns even where no row has settings of its own."""
    prefixes, suffixes, errors, settings_of = [], [], [], []
    for row, error in rows:
        prefix = suffix = settings = None
        if row is not None:
            try:
                parts = task.split(row)
                settings = checked(row)
                prefix, suffix = parts.prefix, parts.suffix
            except (RowError, SamplingError) as exc:
                error = str(exc)
        prefixes.append(prefix)
        suffixes.append(suffix)
        errors.append(None if error is None else f"{ErrorKind.INPUT}: {error}")
        settings_of.append(settings)
    columns = {}
    if all_sampling or any(s is not None for s in settings_of):
        columns = {
            name: pa.array([None if s is None else getattr(s, name) for s in settings_of], SAMPLING_TYPES[name])
            for name in ROW_COLUMNS
        }
    return prompt_rows_from(
        pa.array(prefixes, pa.large_string()),
        pa.array(suffixes, pa.large_string()),
        pa.array(errors, pa.string()),
        positions,
        columns,
    )


def prompt_rows_of_mappings(rows: list[tuple[dict | None, str | None]], positions: pa.Array, task) -> PromptRows:
    """``prompt_rows_of_dicts``'s rows (a Python iterable's: ``Pipeline.stream``) as prompt rows,
    with the same prompts and errors: column-wise, as a file's are (``prompt_rows_of``), where
    every row is a mapping that holds each field of a prompt template as text or None and sets no
    sampling settings of its own; else row by row. Column-wise costs ~1.5 us a row against ~10,
    and makes no Python string per row."""
    table = _text_columns(rows, task)
    if table is None:
        return prompt_rows_of_dicts(rows, positions, task)
    return prompt_rows_of(table, positions, task, RowColumns(tuple(table.column_names), (), ()))


_TEXT_OR_NONE = {str, type(None)}


def _text_columns(rows: list[tuple[dict | None, str | None]], task) -> pa.Table | None:
    """The template's fields of ``rows`` as large_string columns, or None where a row is not
    that plain (not a mapping, a field missing or not text, its own sampling settings)."""
    if not isinstance(task, PromptTemplate) or any(
        row is None or not _SAMPLING_NAMES.isdisjoint(row.keys()) for row, _ in rows
    ):
        return None
    columns = {}
    try:
        for name in dict.fromkeys(task.fields):
            values = [row[name] for row, _ in rows]  # type: ignore[index]
            if not set(map(type, values)) <= _TEXT_OR_NONE:
                return None
            columns[name] = pa.array(values, pa.large_string())
    except (KeyError, TypeError, ValueError, pa.ArrowException):  # (a field missing; a lone surrogate)
        return None
    return pa.table(columns)


_SAMPLING_NAMES = frozenset(ROW_COLUMNS)


def prompt_rows_from(
    prefix: pa.Array,
    suffix: pa.Array,
    error: pa.Array,
    positions: pa.Array,
    sampling: dict[str, pa.Array],
    digests: np.ndarray | None = None,
) -> PromptRows:
    """Sets failed rows apart and digests each distinct prefix once. ``prefix`` is plain text, or a dictionary array
    whose values' digests are ``digests``."""
    failed = pc.is_valid(error)
    ok = pc.invert(failed)
    errors = pa.table({"position": positions.filter(failed), "error": error.filter(failed)}, schema=ERRORS_SCHEMA)
    if not pa.types.is_dictionary(prefix.type):
        codes, digests, first = digest_codes(prefix)
        prefix = pa.DictionaryArray.from_arrays(codes, prefix.take(pa.array(first)))
    elif digests is None:
        digests = text_digests(prefix.dictionary)
    if error.null_count < len(error):  # copy only where a row failed
        prefix, suffix, positions = prefix.filter(ok), suffix.filter(ok), positions.filter(ok)
        sampling = {name: column.filter(ok) for name, column in sampling.items()}
    kept = positions
    adapter_of = None  # each dictionary value's adapter code
    if "adapter" in sampling:
        prefix, digests, adapter_of = adapter_digests(prefix, digests, sampling["adapter"])
    index = prefix.indices.to_numpy(zero_copy_only=False)
    used, first = np.unique(index, return_index=True)
    # Usually every value is used, so the dictionary needs no copy.
    distinct = prefix.dictionary if len(used) == len(prefix.dictionary) else prefix.dictionary.take(pa.array(used))
    digests = digests[used]
    digest_of = np.zeros(len(prefix.dictionary), np.uint64)
    digest_of[used] = digests
    digest = pa.array(digest_of[index])
    out = {"position": kept, "digest": digest, "prefix": on_first_rows(distinct, first, len(index)), "suffix": suffix}
    schema = ROWS_SCHEMA
    for name, column in sampling.items():
        out[name] = column
        schema = schema.append(pa.field(name, column.type))
    rows = pa.table(out, schema=schema)
    documents = _documents(
        digest,
        pc.binary_length(suffix),
        digests,
        pc.binary_length(distinct),
        kept.take(pa.array(first)),
        None if adapter_of is None else adapter_of[used],
    )
    return PromptRows(rows, documents, errors)


def _prompt_index(fields: FieldValues, positions: pa.Array) -> PromptRows:
    """``prompt_rows_from`` without the texts, from the fields' checks and lengths alone."""
    error = fields.error()
    failed = pc.is_valid(error)
    errors = pa.table({"position": positions.filter(failed), "error": error.filter(failed)}, schema=ERRORS_SCHEMA)
    assert fields.codes is not None and fields.digests is not None
    codes, suffix_bytes = fields.codes, pa.array(fields.suffix_bytes())
    if error.null_count < len(error):  # rows with a null document failed, so no code is null after this
        ok = pc.invert(failed)
        codes, suffix_bytes, positions = codes.filter(ok), suffix_bytes.filter(ok), positions.filter(ok)
    index = codes.to_numpy(zero_copy_only=False)
    used, first = np.unique(index, return_index=True)
    digest = pa.array(fields.digests[index], pa.uint64())
    rows = pa.table({"position": positions, "digest": digest}, schema=INDEX_SCHEMA)
    documents = _documents(
        digest,
        suffix_bytes,
        fields.digests[used],
        pa.array(fields.prefix_bytes()[used]),
        positions.take(pa.array(first)),
    )
    return PromptRows(rows, documents, errors, texts=False)


def _documents(
    digest: pa.Array,
    suffix_bytes: pa.Array,
    digests: np.ndarray,
    prefix_bytes: pa.Array,
    first: pa.Array,
    adapters: np.ndarray | None = None,
) -> pa.Table:
    """Per document: its rows here, its suffix and prefix bytes, its first position and its adapter code, 0 for the
    base model. Counted with numpy, not Arrow's group_by and join: those load Arrow's dataset library, ~50 MB more
    in a ``Pipeline.stream`` caller's process."""
    if not len(digest):
        return DOCUMENTS_SCHEMA.empty_table()
    row_digests = digest.to_numpy(zero_copy_only=False)
    order = np.argsort(digests)
    # Each distinct digest's rows and suffix bytes (a partition's bytes are far below float64's exact 2**53),
    # then its place in ``digests``.
    found, inverse = np.unique(row_digests, return_inverse=True)
    rows = np.bincount(inverse, minlength=len(found))
    weights = suffix_bytes.to_numpy(zero_copy_only=False)
    suffix = np.rint(np.bincount(inverse, weights=weights, minlength=len(found))).astype(np.int64)
    at = order[np.searchsorted(digests, found, sorter=order)]
    adapter = np.zeros(len(found), np.uint64) if adapters is None else np.asarray(adapters, np.uint64)[at]
    return pa.table(
        [
            pa.array(found, pa.uint64()),
            pa.array(rows, pa.int64()),
            pa.array(prefix_bytes.to_numpy(zero_copy_only=False)[at], pa.int64()),
            pa.array(suffix, pa.int64()),
            pa.array(first.to_numpy(zero_copy_only=False)[at], pa.int64()),
            pa.array(adapter, pa.uint64()),
        ],
        schema=DOCUMENTS_SCHEMA,
    )


class PartitionTexts:
    """A partition's texts read again after placement, so reads hold no text while the documents are counted."""

    def __init__(self, source, task: PromptTemplate, part: Partition, positions: np.ndarray):
        table = read_partition(source, part)
        if table.num_rows != part.rows:
            raise JobError(
                f"{source.files[part.file]} changed while the job ran (rows {part.start}-{part.stop - 1} "
                f"now {table.num_rows} rows); run the same command again to resume"
            )
        self.task, self.source, self.part = task, source, part
        self._local = positions - part.start  # each row's place in the partition
        every = len(self._local) == table.num_rows
        take = None if every else pa.array(self._local)
        values = field_texts(task, table)
        self._documents = values[0]
        suffix_values = values[1:] if every else [v.take(take) for v in values[1:]]
        self.suffix = joined(task.suffix_pieces, suffix_values, len(self._local))

    def prefixes(self, rows: np.ndarray, lengths: np.ndarray) -> pa.Array:
        """The prefix texts of ``rows``. A length that differs from the one read means the file changed, and is
        refused; comparing lengths costs far less than a digest."""
        texts = joined(self.task.prefix_pieces, [self._documents.take(pa.array(self._local[rows]))], len(rows))
        if not np.array_equal(pc.binary_length(texts).to_numpy(zero_copy_only=False), lengths):
            raise JobError(
                f"{self.source.files[self.part.file]} changed while the job ran (a document of rows "
                f"{self.part.start}-{self.part.stop - 1} is not the one read); run the same command "
                f"again to resume"
            )
        return texts
