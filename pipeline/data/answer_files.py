"""A cluster job's partial output, written by the workers, and how it becomes OUTPUT; every worker must see its
folder.

    OUTPUT.partial/
      _job.json                               which input and partitions, checked on resume
      answers/p000003/<run>-b000012.parquet   one answer task's rows of input partition 3
      answers/p000003/<run>-input.parquet     partition 3's rows that failed reading
      parts/part-000003.parquet               partition 3 merged in input order

A visible file is committed whole. The merged parts are copied in order into OUTPUT, which appears whole, and an
interrupted run resumes from the files, so no row is answered twice or lost."""

from __future__ import annotations

import itertools
import posixpath
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.data.errors import JobError, OutputGone, one_line
from pipeline.data.partitions import ByteBlock, Partition, by_partition
from pipeline.results import RESULT_FIELDS, RowResult

_TOKEN = [pa.field("token", pa.string()), pa.field("logprob", pa.float64())]
LOGPROBS_TYPE = pa.list_(pa.struct([*_TOKEN, pa.field("top_logprobs", pa.list_(pa.struct(_TOKEN)))]))
RESULT_TYPES = {  # the output's result columns
    "answer": pa.string(),
    "error": pa.string(),
    "prompt_tokens": pa.int64(),
    "cached_tokens": pa.int64(),
    "completion_tokens": pa.int64(),
    "shard": pa.string(),
    "latency_s": pa.float64(),
    "finish_reason": pa.string(),
    "answer_json": pa.string(),
    "logprobs": LOGPROBS_TYPE,
    "embedding": pa.list_(pa.float32()),
    "label": pa.string(),
    "label_probs": pa.list_(pa.float64()),
    "score": pa.float64(),
}
# each of a row's answers, when it asked for several: some of the row's own result columns
_CHOICE = ("answer", "finish_reason", "completion_tokens", "answer_json", "error", "logprobs")
RESULT_TYPES["choices"] = pa.list_(pa.struct([pa.field(n, RESULT_TYPES[n]) for n in _CHOICE]))
# The same columns as a DataFrame job's output has them.
PANDAS_TYPES = {
    n: "string" if pa.types.is_string(t) else "object" if pa.types.is_list(t) else t.to_pandas_dtype().__name__
    for n, t in RESULT_TYPES.items()
}
ANSWER_SCHEMA = pa.schema(
    [pa.field("position", pa.int64())] + [pa.field(n, RESULT_TYPES[n]) for n in RESULT_FIELDS[1:]]
)


def results_table(results) -> pa.Table:
    """``RowResult`` s as an answer file's rows; their ``index`` is the row's position."""
    columns = [pa.array([r.index for r in results], pa.int64())]
    columns += [pa.array([getattr(r, n) for r in results], RESULT_TYPES[n]) for n in RESULT_FIELDS[1:]]
    return pa.Table.from_arrays(columns, schema=ANSWER_SCHEMA)


def error_table(positions: pa.Array, errors: pa.Array) -> pa.Table:
    """Rows that failed a check before reaching an engine, shaped as ``RowResult.failed`` shapes them."""
    n = len(positions)

    def column(f: pa.Field) -> pa.Array:
        if f.name == "position":
            return positions
        if f.name == "error":
            return errors
        counted = (pa.types.is_integer(f.type) or pa.types.is_floating(f.type)) and f.name != "score"
        return pa.array([0] * n, f.type) if counted else pa.nulls(n, f.type)

    return pa.Table.from_arrays([column(f) for f in ANSWER_SCHEMA], schema=ANSWER_SCHEMA)


class AnswerFiles:
    """The folder's answer files and merged parts, used on the workers and by the client."""

    def __init__(self, folder):
        self.folder = folder

    def part_path(self, partition: int) -> str:
        return self.folder.path("parts", f"part-{partition:06d}.parquet")

    def merged(self, partition: int) -> bool:
        return self.folder.exists(self.part_path(partition))

    def write(self, partition: int, name: str, table: pa.Table) -> None:
        self.folder.write_table(self.folder.path("answers", f"p{partition:06d}", f"{name}.parquet"), table)

    def answer_files(self, partition: int) -> list[str]:
        return self.folder.glob(f"answers/p{partition:06d}/*.parquet")

    def answered_positions(self, partition: int, before_run: str) -> pa.Array:
        """Only earlier runs count, so that this run's own writes cannot change what a rerun task computes."""
        files = [f for f in self.answer_files(partition) if not posixpath.basename(f).startswith(f"{before_run}-")]
        if not files:
            return pa.array([], pa.int64())
        return pa.concat_arrays(
            [self.folder.read_table(f, columns=["position"]).column(0).combine_chunks() for f in files]
        )

    def named(self, name: str) -> list[str]:
        """The answer files that the answer task ``name`` committed, in every partition."""
        return self.folder.glob(f"answers/p*/{name}-*.parquet")

    def read_named(self, name: str) -> pa.Table:
        return self._read_answers(self.named(name))

    def _read_answers(self, files: list[str]) -> pa.Table:
        tables = [self.folder.read_table(f, schema=ANSWER_SCHEMA) for f in files]
        return pa.concat_tables(tables) if tables else ANSWER_SCHEMA.empty_table()

    def next_seq(self, name: str) -> int:
        seqs = [int(posixpath.basename(f).removesuffix(".parquet").rsplit("-", 1)[1]) for f in self.named(name)]
        return max(seqs) + 1 if seqs else 0

    def committed_rows(self, partitions: list[Partition]) -> int:
        rows = 0
        for part in partitions:
            if self.merged(part.index):
                rows += part.rows if part.rows is not None else self.folder.num_rows(self.part_path(part.index))
            else:
                rows += sum(self.folder.num_rows(f) for f in self.answer_files(part.index))
        return rows

    def drop_damaged(self, partitions: list[Partition], schema: pa.Schema) -> list[str]:
        """Removes the answer files and parts that are not readable Parquet with the expected schema, so that their
        rows are answered again."""
        notes = []
        for part in partitions:
            files = [(f, ANSWER_SCHEMA) for f in self.answer_files(part.index)]
            if self.merged(part.index):
                files.append((self.part_path(part.index), schema))
            for path, expected in files:
                try:
                    found = self.folder.read_schema(path)
                    problem = None if found.equals(expected) else "not this job's columns"
                except (pa.ArrowException, OSError) as exc:
                    problem = one_line(exc)
                if problem is not None:
                    self.folder.remove_file(path)
                    notes.append(f"dropped the damaged file {path} ({problem}); its rows are answered again")
        return notes

    def merge(self, part: Partition | ByteBlock, carry: pa.Table, schema: pa.Schema, key: str | None) -> int:
        """Writes ``part``'s answers in input order beside ``carry``, its input's own columns; every row must have an
        answer."""
        if not self.folder.present():
            raise OutputGone.at(self.folder.url)
        answers = self._read_answers(self.answer_files(part.index))
        answers = answers.take(pc.sort_indices(answers, [("position", "ascending")]))
        positions = answers.column("position").to_numpy()
        keep = np.append(True, positions[1:] != positions[:-1])  # a row answered by two runs keeps its first answer
        if not keep.all():
            answers, positions = answers.filter(keep), positions[keep]
        rows = part.rows if part.rows is not None else carry.num_rows  # a JSONL block's rows are counted as it is read
        if len(positions) != rows or (rows and (positions[0] != part.start or positions[-1] != part.start + rows - 1)):
            raise JobError(
                f"partition {part.index} has {len(positions)} answered rows of {rows}; "
                f"run the same command again to answer the rest"
            )
        ids = carry.column("id") if key else pa.array(range(part.start, part.start + rows), pa.int64())
        names = schema.names
        at = names.index("id")  # the input's own columns, id, then the result columns
        columns = [carry.column(n) for n in names[:at]] + [ids] + [answers.column(n) for n in names[at + 1 :]]
        table = pa.Table.from_arrays(columns, schema=schema)
        self.folder.write_table(self.part_path(part.index), table)
        return table.num_rows

    def finish(
        self, partitions: list[Partition], schema: pa.Schema, final: str, out_schema: pa.Schema | None = None
    ) -> None:
        """Copies the parts in order into OUTPUT, one part in memory at a time, and removes the folder."""
        with self.folder.writing(str(final)) as out, pq.ParquetWriter(out, out_schema or schema) as writer:
            for part in partitions:
                table = self.folder.read_table(self.part_path(part.index), schema=schema)
                writer.write_table(table.cast(out_schema) if out_schema is not None else table)
        self.folder.remove()

    def finish_lines(self, partitions: list, schema: pa.Schema, final: str, lines) -> None:
        """Writes the parts in order into OUTPUT as OpenAI batch JSONL and removes the folder."""
        position = 0
        with self.folder.writing(str(final)) as out:
            for part in partitions:
                table = self.folder.read_table(self.part_path(part.index), schema=schema)
                text = lines.of(table, position)
                out.write(text.encode())
                position += text.count("\n")  # a scoring line gathers several rows
        self.folder.remove()


class BucketCommits:
    """Batches an answer task's answers into answer files, one per input partition at a time: when ``rows`` of a
    partition wait, when ``seconds`` have passed, and at ``close``. So a file holds many rows even when a bucket's
    rows come from many partitions. ``add`` runs in several threads at once."""

    def __init__(
        self,
        files: AnswerFiles,
        starts: tuple[int, ...],
        name: str,
        first_seq: int,
        rows: int,
        seconds: float,
        on_written,
    ):
        self.files, self.starts, self.name = files, np.asarray(starts), name
        self.rows, self.seconds, self.on_written = rows, seconds, on_written
        self._seq = itertools.count(first_seq)
        self._waiting: dict[int, list[pa.Table]] = {}  # partition -> its answers not yet written
        self._lock = threading.Lock()
        self._written_at = time.monotonic()

    def add(self, results: list[RowResult]) -> None:
        table = results_table(results)
        partition = np.searchsorted(self.starts, table.column("position").to_numpy(), side="right") - 1
        with self._lock:
            for number, piece in by_partition(table, partition).items():
                self._waiting.setdefault(number, []).append(piece)
            every = time.monotonic() - self._written_at >= self.seconds
            if every:
                self._written_at = time.monotonic()
            due = [n for n, w in self._waiting.items() if every or sum(t.num_rows for t in w) >= self.rows]
            out = {n: self._waiting.pop(n) for n in due}
        self._write(out)

    def close(self) -> None:
        with self._lock:
            out, self._waiting = self._waiting, {}
        self._write(out)

    def _write(self, out: dict[int, list[pa.Table]]) -> None:
        for number, pieces in sorted(out.items()):
            table = pa.concat_tables(pieces)
            if len(pieces) > 1:
                table = table.take(pc.sort_indices(table, [("position", "ascending")]))
            self.files.write(number, f"{self.name}-{next(self._seq):05d}", table)
            with self._lock:
                self.on_written(table)
