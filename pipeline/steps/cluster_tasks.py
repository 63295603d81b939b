"""The Dask tasks of a cluster job, as they run on the workers.

The client only submits them; rows travel between workers as task results, never through the client. ``read_task``
reads a partition's prompt rows and per-document counts, ``place_task`` assigns documents to shards and buckets,
``split_task`` cuts each partition's rows by shard, and ``answer_task`` answers a bucket on its shard's engine and
commits answer files. ``output_tasks`` then writes OUTPUT."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from distributed import get_worker

from pipeline.data.answer_files import AnswerFiles, BucketCommits, error_table, results_table
from pipeline.data.errors import JobError
from pipeline.data.input import OpenAIBatchSource, ParquetSource
from pipeline.data.job_folder import permanent_write_error
from pipeline.data.partitions import PARTITION_BITS, ByteBlock, Partition, by_partition, runs
from pipeline.data.text_arrays import on_first_rows
from pipeline.sampling import Sampling
from pipeline.steps.placement import Bucket, Placement, place_documents
from pipeline.steps.prompt_table import (
    DOCUMENTS_SCHEMA,
    ERRORS_SCHEMA,
    ROWS_SCHEMA,
    PartitionTexts,
    PromptRows,
    prompt_rows,
)
from pipeline.summary import Figures
from pipeline.worker.grouped_answers import prefixes_of
from pipeline.worker.plugin import shard_plugin
from tasks import PromptTemplate

if TYPE_CHECKING:
    from pipeline.data.row_checks import RowColumns


@dataclass(frozen=True)
class JobSpec:
    """What every task of one job run needs; it is pickled into each task, so it holds no rows."""

    job_id: str
    run: str  # this run's name in the answer files (a resumed job has a new one)
    topic: str  # the event topic answer tasks publish progress to
    # A file job's source, a DataFrame job's RowColumns, or None for a stream.
    source: ParquetSource | OpenAIBatchSource | RowColumns | None
    task: object  # the task kind (tasks.PromptTemplate ...)
    folder: object  # a file job's OUTPUT.partial; None keeps the answers in memory
    schema: pa.Schema | None  # a file job's output schema
    sampling: Sampling
    truncate: bool
    starts: tuple[int, ...] = field(default=())  # each partition's first position, in order
    commit_rows: int = 10_000  # an answer task commits its answers at least this many at a time
    commit_s: float = 30.0  # or this often
    first_rows: int = 0  # requests each answer task admits before its first answer (0: no limit)
    embedding_size: int | None = None  # an embedding job's: OUTPUT's embedding column is a list of this size

    @property
    def embeds(self) -> bool:
        return getattr(self.task, "embeds", False)

    @property
    def labels(self) -> tuple[str, ...] | None:
        return getattr(self.task, "labels", None) or None


def read_task(spec: JobSpec, part: Partition | ByteBlock) -> tuple[PromptRows, Figures]:
    files = AnswerFiles(spec.folder)
    try:
        # Only earlier runs' answers count: Dask may rerun this mid-run to recompute a lost worker's results, and it
        # must get the same rows.
        done = files.answered_positions(part.index, before_run=spec.run)
        if isinstance(part, ByteBlock):
            from pipeline.steps.jsonl_input import jsonl_prompt_rows

            rows = jsonl_prompt_rows(spec.source, spec.task, part, done)
        else:
            rows = prompt_rows(spec.source, spec.task, part, done, texts=False)
    except JobError as exc:
        empty = PromptRows(ROWS_SCHEMA.empty_table(), DOCUMENTS_SCHEMA.empty_table(), ERRORS_SCHEMA.empty_table())
        return empty, Figures(unreadable=str(exc))
    read = part.rows if part.rows is not None else rows.read
    assert read is not None
    return rows, Figures.of_read(read, rows.errors.column("error"))


def figures_of(read: tuple[PromptRows, Figures]) -> Figures:
    return read[1]


def documents_of(read: tuple[PromptRows, Figures]) -> pa.Table:
    return read[0].documents


def place_task(
    shards: list[str],
    held: dict[int, str],
    bucket_rows: int,
    decode_bytes: int,
    *documents: pa.Table,
    max_loras: int = 0,
) -> Placement:
    """Counts each document once over all partitions, then places it."""
    table = pa.concat_tables(documents)
    adapted = "adapter" in table.column_names and pc.max(table.column("adapter")).as_py()
    docs = (
        table.group_by("digest")
        .aggregate(
            [("rows", "sum"), ("prefix_bytes", "max"), ("suffix_bytes", "sum"), ("first", "min")]
            + ([("adapter", "max")] if adapted else [])
        )
        .sort_by("digest")
    )
    rows = docs.column("rows_sum").to_numpy()
    cost = docs.column("prefix_bytes_max").to_numpy() + docs.column("suffix_bytes_sum").to_numpy() + rows * decode_bytes
    placement = place_documents(
        docs.column("digest").to_numpy(),
        rows,
        cost,
        shards,
        held,
        bucket_rows,
        prefix_cost=docs.column("prefix_bytes_max").to_numpy(),
        adapters=docs.column("adapter_max").to_numpy() if adapted else None,
        max_loras=max_loras,
    )
    placement.first = docs.column("first_min").to_numpy()  # in digest order, as the placement's
    return placement


def buckets_of(placement: Placement) -> list[Bucket]:
    return placement.buckets


def split_task(
    read: tuple[PromptRows, Figures], placement: Placement, texts: PartitionTexts | None = None
) -> dict[str, pa.Table]:
    """The partition's rows by shard, each sorted by bucket, document and position. A document's text rides only on
    its first row in the job, so it travels to its shard once; a split document's text rides on the first row of
    each chunk. Rows read without texts take them from ``texts``."""
    rows = read[0].rows
    if not rows.num_rows:
        return {}
    digests, positions = rows.column("digest").to_numpy(), rows.column("position").to_numpy()
    bucket = placement.bucket_of(digests, positions)
    carries = positions == placement.first_of(digests)
    text_row = np.arange(len(positions))  # the row whose text a carrier sends
    if placement.split:
        _carry_split_documents(placement, digests, bucket, carries, text_row)
    keyed = pa.table({"bucket": bucket, "digest": rows.column("digest"), "position": rows.column("position")})
    order = pc.sort_indices(keyed, [("bucket", "ascending"), ("digest", "ascending"), ("position", "ascending")])
    order = order.to_numpy()
    shards = sorted({b.shard for b in placement.buckets})
    shard_of_bucket = np.zeros(len(placement.buckets), np.int64)
    for b in placement.buckets:
        shard_of_bucket[b.index] = shards.index(b.shard)
    if texts is not None:
        rows = rows.append_column("suffix", texts.suffix)
        documents = read[0].documents.sort_by("digest")
        prefix_bytes = np.zeros(len(digests), np.int64)
        prefix_bytes[carries] = documents.column("prefix_bytes").to_numpy()[
            np.searchsorted(documents.column("digest").to_numpy(), digests[carries])
        ]
    else:
        rows, prefix = rows.remove_column(rows.column_names.index("prefix")), rows.column("prefix")
    out = {}
    # A shard's buckets are consecutive, so its rows are one run of the sorted order.
    for s, lo, hi in runs(shard_of_bucket[bucket[order]]):
        take = order[lo:hi]
        # Pieces travel, so they are compact copies that leave out non-carriers' texts.
        if texts is not None:
            carry = take[carries[take]]
            text = on_first_rows(
                texts.prefixes(text_row[carry], prefix_bytes[carry]), np.flatnonzero(carries[take]), len(take)
            )
        else:
            text = prefix.take(pa.array(text_row[take], mask=~carries[take]))
        piece = rows.take(take).add_column(2, ROWS_SCHEMA.field("prefix"), text)
        out[shards[s]] = piece.append_column("bucket", pa.array(bucket[take], pa.int32()))
    return out


def file_split_task(
    spec: JobSpec, read: tuple[PromptRows, Figures], placement: Placement, part: Partition | ByteBlock
) -> dict[str, pa.Table]:
    """Commits the rows that failed reading first. They are written here, not when read, because nothing is written
    before the job's checks pass."""
    errors = read[0].errors
    if errors.num_rows:
        AnswerFiles(spec.folder).write(
            part.index, f"{spec.run}-input", error_table(errors.column("position"), errors.column("error"))
        )
    rows = read[0].rows
    texts: PartitionTexts | None = None
    if not read[0].texts and rows.num_rows:
        assert isinstance(spec.task, PromptTemplate) and isinstance(part, Partition)
        texts = PartitionTexts(spec.source, spec.task, part, rows.column("position").to_numpy())
    return split_task(read, placement, texts)


def bucket_slice(piece: pa.Table | None, bucket: int) -> pa.Table | None:
    """Bucket ``bucket``'s rows of a shard's piece, without the ``bucket`` column."""
    if piece is None or not piece.num_rows:
        return None
    lo, hi = np.searchsorted(piece.column("bucket").to_numpy(), [bucket, bucket + 1])
    return piece.slice(lo, hi - lo).drop_columns(["bucket"]) if hi > lo else None


def _carry_split_documents(
    placement: Placement, digests: np.ndarray, bucket: np.ndarray, carries: np.ndarray, text_row: np.ndarray
) -> None:
    """Makes the first row of each (split document, bucket) here carry the document's text."""
    split = np.flatnonzero(np.isin(digests, np.fromiter(placement.split, np.uint64, len(placement.split))))
    if not len(split):
        return
    _, first_of_document = np.unique(digests, return_index=True)  # rows are in position order
    document_first = dict(zip(digests[first_of_document].tolist(), first_of_document.tolist()))
    keys = np.stack([digests[split].view(np.int64), bucket[split].astype(np.int64)], axis=1)
    _, first = np.unique(keys, axis=0, return_index=True)  # each (document, bucket)'s first row here
    for k in split[first].tolist():
        carries[k] = True
        text_row[k] = document_first[int(digests[k])]


def piece_of(pieces: dict[str, pa.Table], shard: str) -> pa.Table | None:
    return pieces.get(shard)


async def answer_task(
    spec: JobSpec, bucket: Bucket, *pieces: pa.Table | None, task_key: str | None = None
) -> tuple[Figures | Stopped, None]:
    """Answers one bucket on its shard's engine and commits the answers as they come. A rerun after a lost worker
    answers only the rows not yet committed, and once Dask releases ``task_key`` the task stops answering. A write
    that no retry can fix returns ``Stopped``."""
    plugin, rows = _bucket_rows(bucket, pieces)
    files = AnswerFiles(spec.folder)
    name = f"{spec.run}-b{bucket.index:06d}"
    loop = asyncio.get_running_loop()
    earlier = await loop.run_in_executor(None, files.read_named, name)
    figures = Figures.of_answers(earlier, bucket.shard)
    prefixes = prefixes_of(rows)  # a row answered earlier may carry its document's prefix
    if earlier.num_rows:
        rows = rows.filter(pc.invert(pc.is_in(rows.column("position"), value_set=earlier.column("position"))))
    commits = BucketCommits(
        files, spec.starts, name, files.next_seq(name), spec.commit_rows, spec.commit_s, figures.count_answers
    )
    try:
        await plugin.answer_grouped(
            rows,
            f"{spec.job_id}-b{bucket.index}",
            spec.sampling,
            spec.truncate,
            _progress(spec, bucket, earlier.num_rows),
            commit=commits.add,
            first_rows=spec.first_rows,
            prefixes=prefixes,
            task=task_key,
            job=spec.job_id,
            embed=spec.embeds,
            labels=spec.labels,
        )
        await loop.run_in_executor(None, commits.close)
    except Exception as exc:
        if permanent_write_error(exc):
            return Stopped(write_failure(exc, files.folder.url)), None
        # The job was let go or Dask will rerun the task. The answers in hand are written first: progress counted
        # them and a rerun skips them.
        with contextlib.suppress(Exception):
            await loop.run_in_executor(None, commits.close)
        raise
    return figures, None


@dataclass(frozen=True)
class Stopped:
    """Returned, not raised, when a write failed for good: Dask would rerun a raising task, answering the bucket
    again only to fail the same way."""

    why: str


def write_failure(exc: BaseException, where: str) -> str:
    """What the user reads when answers cannot be written to ``where``."""
    if isinstance(exc, JobError):  # it already says what to do
        return str(exc)
    return (
        f"cannot write answers to {where}: {type(exc).__name__}: {' '.join(str(exc).split())}; the answers "
        f"committed so far are kept; make it writable (or free space) and run the same command again to resume"
    )


async def kept_answer_task(
    spec: JobSpec, bucket: Bucket, *pieces: pa.Table | None, task_key: str | None = None
) -> tuple[Figures, dict]:
    """Answers a bucket as ``answer_task`` does but keeps the answers in memory, by input partition, for a DataFrame
    job. A rerun answers the whole bucket again."""
    plugin, rows = _bucket_rows(bucket, pieces)
    results = await plugin.answer_grouped(
        rows,
        f"{spec.job_id}-b{bucket.index}",
        spec.sampling,
        spec.truncate,
        _progress(spec, bucket, 0),
        first_rows=spec.first_rows,
        task=task_key,
        job=spec.job_id,
        embed=spec.embeds,
        labels=spec.labels,
    )
    table = results_table(results)
    return (
        Figures.of_answers(table, bucket.shard),
        by_partition(table, partition_of(table.column("position").to_numpy())),
    )


def figures_of_answer(answer: tuple[Figures, object]) -> Figures:
    return answer[0]


def kept_piece(answer: tuple[dict, dict], partition: int) -> pa.Table | None:
    return answer[1].get(partition)


def _bucket_rows(bucket: Bucket, pieces) -> tuple:
    """This worker's plugin, which must serve the bucket's shard, and the bucket's rows sorted by document and
    position."""
    plugin = shard_plugin()
    if plugin.shard != bucket.shard:
        raise RuntimeError(f"bucket {bucket.index} is for shard {bucket.shard}, not {plugin.shard}")
    tables = [t for t in (bucket_slice(p, bucket.index) for p in pieces) if t is not None]
    rows = pa.concat_tables(tables) if tables else ROWS_SCHEMA.empty_table()
    if len(tables) > 1:
        rows = rows.sort_by([("digest", "ascending"), ("position", "ascending")])
    return plugin, rows


def _progress(spec: JobSpec, bucket: Bucket, offset: int):
    """Reports the rows answered, ``offset`` of them by earlier attempts, and this attempt's tokens to the job's
    event topic."""
    worker = get_worker()

    def progress(done: int, errors: int, tokens: list[int]) -> None:
        worker.log_event(
            spec.topic, {"bucket": bucket.index, "shard": bucket.shard, "rows": offset + done, "tokens": list(tokens)}
        )

    return progress


def frame_positions(number: int, rows: int) -> pa.Array:
    return pa.array((number << PARTITION_BITS) + np.arange(rows, dtype=np.int64))


def partition_of(positions: np.ndarray) -> np.ndarray:
    return positions >> PARTITION_BITS
