"""The Dask tasks of a cluster job, as they run on the workers. The client only submits them
(pipeline/jobs/cluster_job.py); rows travel between workers as these tasks' results, never
through the client or inline through the scheduler.

    read_task (per input partition, any worker)  -> PromptRows
      documents_of                                -> per-document counts
    place_task (one, any worker)                 -> Placement (document -> shard and bucket)
    split_task (per partition, beside its read)  -> {bucket: rows}
      piece_of                                    -> one bucket's rows of one partition
    answer_task (per bucket, on its shard)       -> answer files; figures
    merge_task (per partition)                   -> the partition's part, in input order
    finish_task (one)                            -> OUTPUT
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from distributed import get_worker

from pipeline.jobs.answer_files import AnswerFiles, error_table, results_table
from pipeline.jobs.errors import JobError
from pipeline.jobs.partitions import Partition
from pipeline.jobs.placement import Bucket, Placement, place_documents
from pipeline.jobs.prompt_table import DOCUMENTS_SCHEMA, ERRORS_SCHEMA, ROWS_SCHEMA, PromptRows, prompt_rows, \
    read_partition
from pipeline.results import ErrorKind, RowResult
from pipeline.sampling import Sampling
from pipeline.worker.plugin import shard_plugin


@dataclass(frozen=True)
class JobSpec:
    """What every task of one job run needs (pickled into each task; no rows)."""
    job_id: str
    run: str                  # this run's name in the answer files (a resumed job has a new one)
    topic: str                # the event topic answer tasks publish progress to
    source: object            # the ParquetSource (files, columns; no rows)
    task: object              # the task kind (tasks.PromptTemplate ...)
    folder: Path              # OUTPUT.partial
    schema: pa.Schema         # the output's
    sampling: Sampling
    truncate: bool
    starts: tuple[int, ...] = field(default=())   # each partition's first position, in order


@dataclass
class ReadFigures:
    rows: int = 0                  # rows of the partition read this run (answered rows left out)
    errors: int = 0                # of them, failed reading (answered here with their error)
    errors_by_kind: dict = field(default_factory=dict)
    unreadable: str | None = None  # why the partition could not be read (its rows wait for a rerun)


def read_task(spec: JobSpec, part: Partition) -> tuple[PromptRows, ReadFigures]:
    files = AnswerFiles(spec.folder)
    try:
        rows = prompt_rows(spec.source, spec.task, part, files.answered_positions(part.index))
    except JobError as exc:
        empty = PromptRows(ROWS_SCHEMA.empty_table(), DOCUMENTS_SCHEMA.empty_table(), ERRORS_SCHEMA.empty_table())
        return empty, ReadFigures(unreadable=str(exc))
    figures = ReadFigures(rows=rows.rows.num_rows + rows.errors.num_rows, errors=rows.errors.num_rows)
    if rows.errors.num_rows:
        errors = rows.errors.column("error")
        files.write(part.index, f"{spec.run}-input", error_table(rows.errors.column("position"), errors))
        for text in errors.to_pylist():
            group = RowResult(0, error=text, error_kind=ErrorKind.INPUT).error_group
            figures.errors_by_kind[group] = figures.errors_by_kind.get(group, 0) + 1
    return rows, figures


def figures_of(read: tuple[PromptRows, ReadFigures]) -> ReadFigures:
    return read[1]


def documents_of(read: tuple[PromptRows, ReadFigures]) -> pa.Table:
    return read[0].documents


def place_task(shards: list[str], held: dict[int, str], bucket_rows: int, decode_chars: int,
               *documents: pa.Table) -> Placement:
    """Every document of the job counted once (its rows over all partitions), then placed."""
    docs = pa.concat_tables(documents).group_by("digest").aggregate(
        [("rows", "sum"), ("prefix_chars", "max"), ("suffix_chars", "sum")])
    rows = docs.column("rows_sum").to_numpy()
    cost = docs.column("prefix_chars_max").to_numpy() + docs.column("suffix_chars_sum").to_numpy() + \
        rows * decode_chars
    return place_documents(docs.column("digest").to_numpy(), rows, cost, shards, held, bucket_rows)


def buckets_of(placement: Placement) -> list[Bucket]:
    return placement.buckets


def split_task(read: tuple[PromptRows, ReadFigures], placement: Placement) -> dict[int, pa.Table]:
    """The partition's rows by bucket, each sorted by document then position."""
    rows = read[0].rows
    if not rows.num_rows:
        return {}
    bucket = placement.bucket_of(rows.column("digest").to_numpy())
    keyed = rows.append_column("bucket", pa.array(bucket))
    order = pc.sort_indices(keyed, [("bucket", "ascending"), ("digest", "ascending"), ("position", "ascending")])
    sorted_buckets = bucket[order.to_numpy()]
    cuts = np.flatnonzero(np.diff(sorted_buckets)) + 1
    out = {}
    for lo, hi in zip(np.concatenate(([0], cuts)).tolist(), np.concatenate((cuts, [len(order)])).tolist()):
        out[int(sorted_buckets[lo])] = rows.take(order[lo:hi])   # (a compact copy: it travels)
    return out


def piece_of(pieces: dict[int, pa.Table], bucket: int) -> pa.Table | None:
    return pieces.get(bucket)


async def answer_task(spec: JobSpec, bucket: Bucket, *pieces: pa.Table | None) -> dict:
    """One bucket answered on its shard's engine, grouped by document; its rows written as
    answer files (one per input partition it has rows of). Returns the bucket's figures."""
    plugin = shard_plugin()
    if plugin.shard != bucket.shard:
        raise RuntimeError(f"bucket {bucket.index} is for shard {bucket.shard}, not {plugin.shard}")
    tables = [p for p in pieces if p is not None and p.num_rows]
    rows = pa.concat_tables(tables) if tables else ROWS_SCHEMA.empty_table()
    if len(tables) > 1:
        rows = rows.sort_by([("digest", "ascending"), ("position", "ascending")])
    worker = get_worker()

    def progress(done: int, errors: int) -> None:
        worker.log_event(spec.topic, {"bucket": bucket.index, "shard": bucket.shard, "rows": done, "errors": errors})

    results = await plugin.answer_grouped(rows, f"{spec.job_id}-b{bucket.index}", spec.sampling, spec.truncate,
                                          progress)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, _commit, spec, bucket, results)


def _commit(spec: JobSpec, bucket: Bucket, results: list[RowResult]) -> dict:
    figures = {"rows": len(results), "errors": 0, "errors_by_kind": {}, "prompt_tokens": 0, "cached_tokens": 0,
               "completion_tokens": 0, "shard": bucket.shard}
    for r in results:
        if r.error is not None:
            figures["errors"] += 1
            group = r.error_group
            figures["errors_by_kind"][group] = figures["errors_by_kind"].get(group, 0) + 1
        figures["prompt_tokens"] += r.prompt_tokens
        figures["cached_tokens"] += r.cached_tokens
        figures["completion_tokens"] += r.completion_tokens
    if not results:
        return figures
    table = results_table(results)
    table = table.take(pc.sort_indices(table, [("position", "ascending")]))
    positions = table.column("position").to_numpy()
    partition = np.searchsorted(np.asarray(spec.starts), positions, side="right") - 1
    cuts = np.flatnonzero(np.diff(partition)) + 1
    files = AnswerFiles(spec.folder)
    for lo, hi in zip(np.concatenate(([0], cuts)).tolist(), np.concatenate((cuts, [len(partition)])).tolist()):
        files.write(int(partition[lo]), f"{spec.run}-b{bucket.index:06d}", table.slice(lo, hi - lo))
    return figures


def merge_task(spec: JobSpec, part: Partition) -> int:
    source = spec.source
    carry = read_partition(source, part, columns=source.passthrough + (["id"] if source.key else []))
    return AnswerFiles(spec.folder).merge(part, carry, spec.schema, source.key)


def finish_task(spec: JobSpec, partitions: list[Partition], final: Path) -> None:
    AnswerFiles(spec.folder).finish(partitions, spec.schema, final)
