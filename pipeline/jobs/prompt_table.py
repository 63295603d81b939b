"""Runs on a worker: one input partition read as Arrow and turned into prompt rows, with Arrow
compute, not row by row in Python.

For a prompt template (the default document-question task, or ``task: template``) whose
columns are valid text, the shareable prefix and the row's suffix are joined column-wise from
the template's pieces, and the checks (null, empty) are column-wise too. Anything else (numbers
a template writes as text, undecodable bytes, a row's own sampling settings) takes the task's
own per-row path, on the worker, so every row gets exactly the prompt or the error the
client-side path gives it. Each distinct prefix (document) is digested once
(``prefix_digest``, the digest the workers remember what their engines hold by).

A ``PromptRows`` holds:
- ``rows``: position, digest, prefix, suffix (and the row's sampling columns, if the input has
  them) for every row that became a prompt. A document's prefix text is on the first of its
  rows only (null on the others; ``prefixes_of``), so a row costs its suffix, not its document,
  on its way to its shard;
- ``documents``: per distinct prefix, its digest, rows and UTF-8 bytes (what placement counts)
  and the position of its first row here;
- ``errors``: position and error text of every row that failed here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from dask.sizeof import sizeof

from pipeline.jobs.errors import JobError
from pipeline.jobs.partitions import Partition
from pipeline.jobs.row_checks import RowColumns
from pipeline.prefix_memory import encoded_by_digest, text_digests
from pipeline.results import ErrorKind
from pipeline.sampling import ROW_COLUMNS, SamplingError, checked
from tasks import PromptTemplate, RowError

ROWS_SCHEMA = pa.schema({"position": pa.int64(), "digest": pa.uint64(), "prefix": pa.large_string(),
                         "suffix": pa.large_string()})
DOCUMENTS_SCHEMA = pa.schema({"digest": pa.uint64(), "rows": pa.int64(), "prefix_bytes": pa.int64(),
                              "suffix_bytes": pa.int64(), "first": pa.int64()})
ERRORS_SCHEMA = pa.schema({"position": pa.int64(), "error": pa.string()})


@dataclass
class PromptRows:
    rows: pa.Table
    documents: pa.Table
    errors: pa.Table
    read: int | None = None   # rows of the partition read, those answered by an earlier run too (JSONL)


@sizeof.register(PromptRows)
def _sizeof_prompt_rows(rows: PromptRows) -> int:
    """What a worker holds for a read partition (Dask spills by it: jobs.worker_memory)."""
    return rows.rows.nbytes + rows.documents.nbytes + rows.errors.nbytes


def read_partition(source, part: Partition, columns: list[str] | None = None) -> pa.Table:
    """The partition's rows of ``columns`` (default: every column the task reads)."""
    if columns is None:
        columns = source.row_columns.all
    path = source.files[part.file]
    try:
        table = pq.ParquetFile(path, filesystem=source.fs).read_row_groups(list(part.row_groups), columns=columns)
    except (pa.ArrowException, OSError) as exc:
        raise JobError(f"cannot read {path}: {' '.join(str(exc).split())}. The rows of its other partitions are "
                       f"answered and kept; fix or replace the file and run the same command again to resume") from None
    return table.slice(part.skip, part.rows)


def prompt_rows(source, task, part: Partition, done: pa.Array | None = None) -> PromptRows:
    """The partition as prompt rows; rows whose position is in ``done`` (answered by an
    earlier run) are left out."""
    table = read_partition(source, part)
    positions = pa.array(np.arange(part.start, part.stop, dtype=np.int64))
    if done is not None and len(done):
        keep = pc.invert(pc.is_in(positions, value_set=done))
        table, positions = table.filter(keep), positions.filter(keep)
    return prompt_rows_of(table, positions, task, source.row_columns)


def prompt_rows_of(table: pa.Table, positions: pa.Array, task, columns: RowColumns) -> PromptRows:
    """``table``'s rows (the task's ``columns``; each row's position in ``positions``) as prompt rows."""
    if isinstance(task, PromptTemplate) and not columns.sampling_columns and _plain_text(table, task):
        prefix, suffix, error, digests = _template_columns(task, table)
    else:
        prefix, suffix, error = _row_by_row(columns, task, table)
        digests = None
    sampling = {name: table.column(name).combine_chunks() for name in columns.sampling_columns}
    return prompt_rows_from(prefix, suffix, error, positions, sampling, digests)


def prompt_rows_from(prefix: pa.Array, suffix: pa.Array, error: pa.Array, positions: pa.Array,
                     sampling: dict[str, pa.Array], digests: np.ndarray | None = None) -> PromptRows:
    """Prompt rows from each row's prefix, suffix, error (null where the row is fine), position
    and own sampling columns: the rows that failed apart, each distinct prefix digested once.
    ``prefix`` as plain text, or as a dictionary array with each dictionary value's digest in
    ``digests``."""
    failed = pc.is_valid(error)
    ok = pc.invert(failed)
    errors = pa.table({"position": positions.filter(failed), "error": error.filter(failed)}, schema=ERRORS_SCHEMA)
    if not pa.types.is_dictionary(prefix.type):
        prefix, digests = encoded_by_digest(prefix)
    elif digests is None:
        digests = text_digests(prefix.dictionary)
    prefix, suffix, kept = prefix.filter(ok), suffix.filter(ok), positions.filter(ok)
    # each distinct prefix (document) once: its text, its digest, the first of its rows here
    index = prefix.indices.to_numpy(zero_copy_only=False)
    used, first = np.unique(index, return_index=True)
    # (every value used, the usual case: the dictionary itself, not a copy of its text)
    distinct = prefix.dictionary if len(used) == len(prefix.dictionary) else prefix.dictionary.take(pa.array(used))
    digests = digests[used]
    digest_of = np.zeros(len(prefix.dictionary), np.uint64)
    digest_of[used] = digests
    digest = pa.array(digest_of[index])
    out = {"position": kept, "digest": digest, "prefix": _on_first_rows(distinct, first, len(index)),
           "suffix": suffix}
    schema = ROWS_SCHEMA
    for name, column in sampling.items():
        column = column.filter(ok)
        out[name] = column
        schema = schema.append(pa.field(name, column.type))
    rows = pa.table(out, schema=schema)
    counts = pa.table({"digest": digest, "suffix_bytes": pc.binary_length(suffix)}).group_by("digest").aggregate(
        [("digest", "count"), ("suffix_bytes", "sum")])
    lengths = pa.table({"digest": pa.array(digests, pa.uint64()), "prefix_bytes": pc.binary_length(distinct),
                        "first": kept.take(pa.array(first))})
    documents = counts.join(lengths, "digest").select(["digest", "digest_count", "prefix_bytes", "suffix_bytes_sum",
                                                       "first"])
    documents = pa.table(documents.columns, schema=DOCUMENTS_SCHEMA) if documents.num_rows else \
        DOCUMENTS_SCHEMA.empty_table()
    return PromptRows(rows, documents, errors)


def _on_first_rows(texts: pa.Array, first: np.ndarray, n: int) -> pa.Array:
    """A column of ``n`` rows holding ``texts[i]`` on row ``first[i]``, null on every other."""
    pick = np.zeros(n, np.int64)
    pick[first] = np.arange(len(first))
    empty = np.ones(n, bool)
    empty[first] = False
    return texts.cast(pa.large_string()).take(pa.array(pick, mask=empty))


def prefixes_of(rows: pa.Table) -> dict[int, str]:
    """Each document's prefix text by its digest, from the rows that carry it."""
    carriers = rows.filter(pc.is_valid(rows.column("prefix")))
    return dict(zip(carriers.column("digest").to_pylist(), carriers.column("prefix").to_pylist()))


def _plain_text(table: pa.Table, task: PromptTemplate) -> bool:
    """Every column the template reads is a string column of valid UTF-8."""
    for name in set(task._fields):
        column = table.column(name)
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            return False
        try:
            column.validate(full=True)
        except pa.ArrowInvalid:
            return False
    return True


def _template_columns(task: PromptTemplate, table: pa.Table) -> tuple[pa.Array, pa.Array, pa.Array,
                                                                      np.ndarray | None]:
    """Prefix, suffix and error (null where the row is fine) joined column-wise, with the same
    checks and texts as ``PromptTemplate.split``: the first field that fails names the error.
    A prefix of one field (a document) is dictionary-encoded: each distinct value is checked and
    joined once, and the prefix comes back as a dictionary array, with each dictionary value's
    digest (else None: the prefix is plain text)."""
    n = table.num_rows
    cut = len(task._prefix_pieces) - 1
    document = digests = None
    if cut == 1:   # (each row's prefix digested as read: the digest tells the documents apart)
        head, tail = task._prefix_pieces
        document, digests = encoded_by_digest(table.column(task._fields[0]).combine_chunks(), head, tail)
    values = [document if i == 0 and document is not None else table.column(f).combine_chunks().cast(pa.large_string())
              for i, f in enumerate(task._fields)]
    error = pa.nulls(n, pa.string())
    for i, (field, value) in enumerate(zip(task._fields, values)):
        reason = pc.if_else(pc.is_null(value), pa.scalar(f"{ErrorKind.INPUT}: {field} is null"), None)
        if task.strict_text:
            blank = _blank(document.dictionary).take(document.indices) if i == 0 and document is not None \
                else _blank(value)
            reason = pc.coalesce(reason, pc.if_else(pc.fill_null(blank, False),
                                                    pa.scalar(f"{ErrorKind.INPUT}: {field} is empty"), None))
        error = pc.coalesce(error, reason)
    if document is not None:
        texts = _join(task._prefix_pieces, [document.dictionary], len(document.dictionary))
        prefix = pa.DictionaryArray.from_arrays(document.indices, texts)
    else:
        prefix = _join(task._prefix_pieces, values[:cut], n)
    suffix = _join(task._suffix_pieces, values[cut:], n)
    return prefix, suffix, error.cast(pa.string()), digests


def _blank(value: pa.Array) -> pa.Array:
    # (no bytes is no characters: the byte length comes from the offsets, utf8_length reads the text)
    return pc.or_(pc.equal(pc.binary_length(value), 0), pc.utf8_is_space(value))


def _join(pieces: list[str], values: list[pa.Array], n: int) -> pa.Array:
    parts: list = [pa.scalar(pieces[0], pa.large_string())]
    for value, piece in zip(values, pieces[1:]):
        parts += [value, pa.scalar(piece, pa.large_string())]
    if not values:
        return pa.array([pieces[0]] * n, pa.large_string())
    return pc.binary_join_element_wise(*parts, pa.scalar("", pa.large_string()))


def _row_by_row(columns: RowColumns, task, table: pa.Table) -> tuple[pa.Array, pa.Array, pa.Array]:
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
