"""``Pipeline.stream`` and ``Pipeline.run``: rows of a Python iterable, answered on the cluster as a file job's are.

The iterable is read a window at a time, bounded by ``intake.read_ahead_rows`` and ``read_ahead_chars``, and
each window is one cluster job whose answer tasks keep their answers in memory. The next window is read while
one is answered, and only once the caller has taken all but a window of the results, so this process holds at
most three windows however long the input and however slow the caller. A row that cannot be answered gets its
error at once. A lost worker costs no row: the window's rows are part of its tasks' graph, so Dask computes
again what the worker held.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.data.partitions import PARTITION_BITS
from pipeline.jobs.stream_steps import IterableSteps
from pipeline.model import head_labels
from pipeline.results import ErrorKind, RowResult
from pipeline.steps.cluster_tasks import frame_positions
from pipeline.steps.prompt_table import PromptRows, prompt_rows_of_mappings
from pipeline.summary import JobSummary
from tasks import get_task_kind

# Rows of a window in one partition, whose prompt rows travel in one task. The caller's dicts are held until
# their partition is full, and the window's bound is checked once a partition, so partitions stay small.
PARTITION_ROWS = 4096
# A watched stream's first window's rows: its first answers come once this many are answered
# (each window's answers come back as its buckets end); its windows then grow to the full size.
FIRST_WINDOW_ROWS = 64
_END = object()


@dataclass
class Window:
    """Rows ``start``.. of the iterable as prompt rows, one ``PromptRows`` per partition (each
    row's position: its partition's number and its place there, ``frame_positions``)."""

    start: int
    parts: list[PromptRows] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)  # rows of each partition
    ids: list = field(default_factory=list)  # each row's id (its ``id`` field, else its index)

    @property
    def rows(self) -> int:
        return len(self.ids)

    def index(self, positions: np.ndarray) -> np.ndarray:
        """The iterable's indices of rows at ``positions``."""
        starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64) + self.start
        return starts[positions >> PARTITION_BITS] + (positions & ((1 << PARTITION_BITS) - 1))


def windows(
    rows: Iterable[Mapping[str, Any]],
    task,
    max_rows: int,
    max_chars: int,
    part_rows: int = PARTITION_ROWS,
    first_rows: int = FIRST_WINDOW_ROWS,
) -> Iterator[Window]:
    """The rows a window at a time (module docstring): the first of ``first_rows`` rows, each
    next twice the one before, up to ``max_rows``."""
    it = iter(rows)
    start = 0
    size = min(first_rows, max_rows)
    while True:
        window = Window(start)
        chars = 0
        batch: list[tuple[Mapping | None, str | None]] = []
        for row in it:
            index = start + window.rows
            if isinstance(row, Mapping):
                window.ids.append(row.get("id", index))
                batch.append((row, None))
            else:
                window.ids.append(index)
                batch.append(
                    (None, f"row {index} is not a mapping of column names to values (got {type(row).__name__})")
                )
            if len(batch) == part_rows:
                chars += _add_part(window, batch, task)
                batch = []
            if window.rows >= size or chars >= max_chars:
                break
        if batch:
            _add_part(window, batch, task)
        if not window.rows:
            return
        yield window
        start += window.rows
        size = min(2 * size, max_rows)


def _add_part(window: Window, batch: list, task) -> int:
    """``batch`` as the window's next partition; its prompt text's characters."""
    number = len(window.parts)
    rows = prompt_rows_of_mappings(batch, frame_positions(number, len(batch)), task)
    window.parts.append(rows)
    window.sizes.append(len(batch))
    _release_arrow_memory()
    docs = rows.documents
    return int(pc.sum(docs.column("prefix_bytes")).as_py() or 0) + int(pc.sum(docs.column("suffix_bytes")).as_py() or 0)


def _release_arrow_memory() -> None:
    """Arrow's default pool keeps freed memory per thread instead of giving it back, the caller's own Parquet
    reading included, so a long stream would hold its largest windows' worth for good."""
    pa.default_memory_pool().release_unused()


def results_of(table: pa.Table, window: Window) -> list[RowResult]:
    """Answer rows (``ANSWER_SCHEMA``) as ``RowResult`` s with the iterable's indices and ids, built by one C loop
    over the columns: a stream makes one for every row."""
    index = window.index(table.column("position").to_numpy()).tolist()
    ids = list(map(window.ids.__getitem__, [i - window.start for i in index]))
    given = {"index": index, "id": ids, "error_kind": repeat(None)}
    columns = [given[n] if n in given else table.column(n).to_pylist() for n in RowResult.__struct_fields__]
    out = list(map(RowResult, *columns))
    for k in pc.indices_nonzero(table.column("error").is_valid()).to_pylist():
        out[k].error_kind = ErrorKind.of(out[k].error)
    return out


class IterableJob:
    """One ``Pipeline.stream`` call (its arguments are ``stream``'s): windows read in a thread,
    each run as a cluster job in another, results handed to ``results()`` as they come."""

    def __init__(
        self,
        pipeline,
        rows: Iterable[Mapping[str, Any]],
        task,
        sampling,
        truncate_prompts: bool,
        watched: bool,
        rows_total: int | None,
    ):
        self.p = pipeline
        config = pipeline.config
        if isinstance(sampling, Mapping):
            sampling = config.replace(sampling=dict(sampling)).sampling
        self.config = config.replace(sampling=sampling.model_dump()) if sampling is not None else config
        self.rows, self.truncate, self.watched = rows, truncate_prompts, watched
        if isinstance(task, str):  # (a task's name, as in the config: its prompt settings the config's)
            self.config = self.config.for_job(task=task)
            task = get_task_kind(self.config, pipeline.tokenizer, head_labels(self.config))
        self.task = task if task is not None else pipeline.task
        self.report = JobSummary()
        self.report.rows_total = rows_total
        self._out: queue.Queue = queue.Queue()
        self._unread = 0  # results handed over, not yet taken by the caller
        self._taken = threading.Condition()
        self._stop = threading.Event()
        self._job_id: str | None = None  # the first window's: the stream's on the dashboard
        self._errors = 0  # rows answered with an error by the windows run so far

    def results(self) -> Iterator[RowResult]:
        runner = threading.Thread(target=self._run, name="pipeline-stream", daemon=True)
        t0 = time.perf_counter()
        runner.start()
        try:
            while True:
                item = self._out.get()
                if item is _END:
                    break
                if isinstance(item, BaseException):
                    raise item
                for r in item:
                    if self.report.first_answer_s is None:
                        self.report.first_answer_s = time.perf_counter() - t0
                    self.report.add(r)
                    yield r
                with self._taken:
                    self._unread -= len(item)
                    self._taken.notify()
        finally:
            self._stop.set()
            runner.join()
            self.report.seconds = time.perf_counter() - t0

    def _run(self) -> None:
        from pipeline.jobs.cluster_job import ClusterJob, JobLeft

        intake = self.config.intake
        # (a thread of its own, not a pool: a caller's iterable that blocks must not hold this one)
        reader = ThreadPoolExecutor(1, thread_name_prefix="pipeline-stream-read")
        try:
            # (watched: small windows first, for early answers; else every window full, for throughput)
            first = FIRST_WINDOW_ROWS if self.watched else intake.read_ahead_rows
            it = windows(self.rows, self.task, intake.read_ahead_rows, intake.read_ahead_chars, first_rows=first)
            nxt = reader.submit(next, it, None)
            while not self._stop.is_set():
                window = nxt.result()
                if window is None:
                    break
                nxt = reader.submit(next, it, None)  # (read while this one is answered)
                self._wait_for_the_caller(intake.read_ahead_rows)
                try:
                    self._window(ClusterJob, window)
                except JobLeft:
                    break
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self._out.put(exc)
        finally:
            reader.shutdown(wait=False, cancel_futures=True)
            self._out.put(_END)

    def _hand_over(self, results: list[RowResult]) -> None:
        with self._taken:
            self._unread += len(results)
        self._out.put(results)

    def _wait_for_the_caller(self, rows: int) -> None:
        """Until the caller has taken all but ``rows`` of the results handed over: a slow caller
        holds the next window back, so results do not pile up here."""
        with self._taken:
            while self._unread > rows and not self._stop.is_set():
                self._taken.wait(timeout=0.5)

    def _window(self, job_class, window: Window) -> None:
        errors = pa.concat_tables([p.errors for p in window.parts])
        if errors.num_rows:  # (rows that failed reading: answered at once)
            from pipeline.data.answer_files import error_table

            self._hand_over(results_of(error_table(errors.column("position"), errors.column("error")), window))

        def on_answers(table: pa.Table) -> None:
            self._hand_over(results_of(table, window))

        before = self.report.rows_read, self._errors, list(self.report.events)

        def shown(job: dict) -> dict:  # (the dashboard's view: the stream's figures, not the window's)
            rows, errors, events = before
            total = self.report.rows_total
            job.update(
                job=self._job_id or job["job"],
                rows=rows + job["rows"],
                rows_read=rows + window.rows,
                rows_total=total if total is not None else rows + window.rows,
                rows_with_error=errors + job["rows_with_error"],
                events=[*(e.as_dict() for e in events), *job["events"]],
            )
            return job

        steps = IterableSteps(window, self.task, on_answers, shown)
        job = job_class(steps, self.config, self.truncate)
        summary = job.run(self.p, progress=False, watched=self.watched, stop=self._stop)
        self.report.job = summary.job
        self._job_id = self._job_id or summary.job
        self._errors += summary.errors
        self.report.events += summary.events
        self.report.buckets_moved += summary.buckets_moved
        self.report.rows_read += window.rows
        _release_arrow_memory()
