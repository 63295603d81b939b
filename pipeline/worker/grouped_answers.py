"""Answers a bucket's rows on the worker's resident engine, one document at a time.

Rows arrive sorted by document. Each document's prefix is tokenized once and its questions are admitted together, so
the engine prefills the document once and does not evict it between its own questions."""

from __future__ import annotations

import asyncio
import collections.abc
import functools
import time
from typing import Any, Coroutine, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.results import RowResult
from pipeline.sampling import ROW_COLUMNS, checked
from pipeline.token_estimate import estimated_tokens
from pipeline.worker.admission import TokenGate

PROGRESS_EVERY_S = 1.0
# Answers are handed to ``commit`` this many at a time or this often; the commit decides when they are written.
HAND_OVER_ROWS = 4096
HAND_OVER_S = 0.25
T = TypeVar("T")


async def answer_grouped(
    plugin, rows: pa.Table, bucket_id: str, sampling, truncate: bool, progress=None, commit=None, **rest
) -> list[RowResult]:
    """One result per row, in ``rows``' order; ``rest`` is the rest of ``Admission``'s arguments. ``commit`` runs
    in the thread pool; the first that fails aborts the rows in flight."""
    book = Bookkeeping(rows.num_rows, progress, commit)
    admission = Admission(plugin, rows, bucket_id, sampling, truncate, book, **rest)
    try:
        await admission.run()
    except BaseException:  # Dask cancelled the task: the rows in flight stop too.
        book.stop()
        await book.settle()
        raise
    return await book.finish()


def prefixes_of(rows: pa.Table) -> dict[int, str]:
    """A prompt table carries each document's prefix on its first row only."""
    carriers = rows.filter(pc.is_valid(rows.column("prefix")))
    return dict(zip(carriers.column("digest").to_pylist(), carriers.column("prefix").to_pylist()))


class Bookkeeping:
    """Keeps results in row order, hands them to ``commit``, reports progress and keeps the first failure."""

    def __init__(self, n: int, progress, commit):
        self.progress, self.commit = progress, commit
        self.results: list[RowResult | None] = [None] * n
        self.done = self.errors = 0
        self.tokens = [0, 0, 0]  # the rows done: prompt, cached and completion tokens
        self.failure: list[BaseException] = []
        self.answered_one = asyncio.Event()
        self.tasks: set[asyncio.Task] = set()  # rows waiting for the engine
        self.stopped = False
        self._loop = asyncio.get_running_loop()
        self._ready: list[RowResult] = []  # answered, not yet handed to commit
        self._commits: list[asyncio.Future] = []
        self._committed_at = self._progress_at = time.monotonic()

    def answered(self, k: int, r: RowResult) -> None:
        self.results[k] = r
        self.answered_one.set()
        self._ready.append(r)
        now = time.monotonic()
        if len(self._ready) >= HAND_OVER_ROWS or now - self._committed_at >= HAND_OVER_S:
            self._hand_over()
        self.done += 1
        self.errors += r.error is not None
        self.tokens[0] += r.prompt_tokens
        self.tokens[1] += r.cached_tokens
        self.tokens[2] += r.completion_tokens
        if self.progress is not None and (now - self._progress_at >= PROGRESS_EVERY_S or self.done == 1):
            self._progress_at = now
            self.progress(self.done, self.errors, self.tokens)

    def settled(self, k: int, task: asyncio.Task) -> None:
        """Once answering has stopped nothing more is committed: the task's rerun answers those rows again, so none
        is written twice."""
        if task.cancelled() or self.stopped:
            return
        try:
            self.answered(k, task.result())
        except BaseException as exc:  # noqa: BLE001 - raised by the caller once the others stop
            self.failure.append(exc)

    def stop(self) -> None:
        """Cancels the rows in flight; rows already answered are still committed, since progress counted them."""
        self._hand_over()
        self.stopped = True
        for task in list(self.tasks):
            task.cancel()

    async def settle(self) -> None:
        """Waits for the handed-over commits, so nothing of this answering is written after it ends."""
        await asyncio.gather(*self._commits, return_exceptions=True)

    async def finish(self) -> list[RowResult]:
        """Raises the first failure, or commits the rest and returns the results."""
        if self.failure:
            await self.settle()
            raise self.failure[0]
        self._hand_over()
        await asyncio.gather(*self._commits)
        if self.progress is not None:
            self.progress(self.done, self.errors, self.tokens)
        return cast("list[RowResult]", self.results)

    def _hand_over(self) -> None:
        if self.commit is not None and self._ready and not self.failure:
            future = self._loop.run_in_executor(None, self._committing, self._ready)
            future.add_done_callback(self._commit_done)
            self._commits.append(future)
        self._ready, self._committed_at = [], time.monotonic()

    def _committing(self, rows: list[RowResult]) -> None:
        """Records a failure at once, so the loop stops starting rows even if it never waits."""
        try:
            self.commit(rows)
        except BaseException as exc:  # noqa: BLE001 - raised by the caller once the others stop
            self.failure.append(exc)
            raise

    def _commit_done(self, future: asyncio.Future) -> None:
        """A failed commit aborts the requests in flight, since their answers could not be committed."""
        if not future.cancelled() and future.exception() is not None:
            for task in list(self.tasks):
                task.cancel()


class Admission:
    """Starts a bucket's rows one document at a time, within the token gate, the in-flight window and
    ``first_rows``: until the first answer only that many are admitted, so it is not decoded in a full batch.
    ``prefixes`` defaults to those the rows carry, ``job`` to the bucket."""

    def __init__(
        self,
        plugin,
        rows: pa.Table,
        bucket_id: str,
        sampling,
        truncate: bool,
        book: Bookkeeping,
        first_rows: int = 0,
        prefixes: dict[int, str] | None = None,
        job: str | None = None,
        embed: bool = False,
        labels: tuple[str, ...] | None = None,
    ):
        self.embed, self.labels, self.job = embed, labels, job or bucket_id
        self.plugin, self.bucket_id, self.sampling, self.truncate = plugin, bucket_id, sampling, truncate
        self.first_rows, self.book = first_rows, book
        self.prefixes = prefixes if prefixes is not None else prefixes_of(rows)
        n = rows.num_rows
        self.positions = rows.column("position").to_numpy()
        self.digests = rows.column("digest").to_numpy()
        self.suffixes = rows.column("suffix").to_pylist()
        self.own = _row_sampling(rows)
        # Rows that name adapters start grouped by adapter, since the engine applies a few adapters per step.
        self.order, group = adapter_order(rows, self.digests)
        starts = np.flatnonzero(np.concatenate(([True], group[1:] != group[:-1]))) if n else np.array([], int)
        decode = 1 if labels else sampling.max_tokens or plugin.config.sampling.max_tokens
        # Each document's row range and its questions' estimated tokens, answers included, for the token gate.
        asked: list[int] = []
        if n:
            suffix_tokens = estimated_tokens(np.fromiter(map(len, self.suffixes), np.int64, n))[self.order]
            asked = np.add.reduceat(suffix_tokens + decode, starts).tolist()
        self.documents = list(zip(starts.tolist(), np.append(starts[1:], n).tolist(), asked))
        self.window = 2 * plugin.config.intake.max_in_flight  # rows started, not yet answered
        self.waiting = 0  # rows started that wait for the engine
        self.room = asyncio.Event()

    async def run(self) -> None:
        """Returns once every started row has ended."""
        # Embeddings hold no KV cache once computed, so they skip the token gate.
        gate = None if self.embed else self.plugin.token_gate
        for lo, hi, questions in self.documents:
            if self.book.failure:
                break
            digest = int(self.digests[self.order[lo]])
            prefix_ids = self.plugin.engine.encode(self.prefixes[digest])
            if self.plugin.prefixes is not None:
                self.plugin.prefixes.served_digest(digest, len(prefix_ids))
            tokens = len(prefix_ids) + questions
            if gate is not None:
                await gate.acquire(tokens, self.job)
            started = await self._start_document(lo, hi, prefix_ids)
            if gate is not None:
                _release_when_done(gate, tokens, self.job, started)
        if self.book.tasks:
            await asyncio.gather(*self.book.tasks, return_exceptions=True)

    async def _start_document(self, lo: int, hi: int, prefix_ids: list[int]) -> list[asyncio.Task]:
        """Starts one document's rows and returns those that wait for the engine."""
        book, started = self.book, []
        for i in range(lo, hi):
            k = int(self.order[i])
            if self.first_rows and i >= self.first_rows and not book.answered_one.is_set():
                await book.answered_one.wait()
            while self.waiting >= self.window:
                self.room.clear()
                await self.room.wait()
            if book.failure:
                break
            s = self.own[k] if self.own is not None else None
            try:
                sampling = s.over(self.sampling) if s is not None else self.sampling
                task, r = start_eagerly(self._request(k, prefix_ids, sampling))
                if task is None:
                    assert r is not None
                    book.answered(k, r)
                    continue
            except BaseException as exc:  # noqa: BLE001 - raised by the caller once the others stop
                book.failure.append(exc)
                break
            self.waiting += 1
            book.tasks.add(task)
            task.add_done_callback(book.tasks.discard)
            task.add_done_callback(functools.partial(self._settled, k))
            started.append(task)
        return started

    def _request(self, k: int, prefix_ids, sampling) -> Coroutine[Any, Any, RowResult]:
        position, suffix, plugin = int(self.positions[k]), self.suffixes[k], self.plugin
        if self.embed:
            return plugin.embed_row(self.job, self.bucket_id, position, prefix_ids, suffix, self.truncate, sampling)
        if self.labels:
            return plugin.classify_row(
                self.job, self.bucket_id, position, prefix_ids, suffix, self.truncate, self.labels
            )
        return plugin.answer_row(self.job, self.bucket_id, position, prefix_ids, suffix, self.truncate, sampling)

    def _settled(self, k: int, task: asyncio.Task) -> None:
        self.waiting -= 1
        self.room.set()
        self.book.settled(k, task)


def start_eagerly(coro: Coroutine[Any, Any, T]) -> tuple[asyncio.Task[T] | None, T | None]:
    """Runs ``coro`` up to its first real wait, as Python 3.12's eager tasks do, so a request answered at once costs
    no Task and no trip round the loop. Returns (task, None) or (None, result)."""
    try:
        waiting_for = coro.send(None)
    except StopIteration as stop:
        return None, stop.value
    return asyncio.ensure_future(_Started(coro, waiting_for)), None


class _Started(collections.abc.Coroutine):
    """A started coroutine for a Task to continue. A Task cancelled before its first step throws into the coroutine,
    so the request is aborted and its ``finally`` runs instead of being left suspended."""

    def __init__(self, coro, waiting_for):
        self._coro, self._waiting_for = coro, waiting_for
        self._first = True

    def send(self, value):
        if self._first:
            self._first = False
            return self._waiting_for
        return self._coro.send(value)

    def throw(self, *exc):
        self._first = False
        return self._coro.throw(*exc)

    def close(self) -> None:
        self._coro.close()

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        return self.send(None)


def _release_when_done(gate: TokenGate, tokens: float, job: str, tasks: list[asyncio.Task]) -> None:
    async def wait() -> None:
        await asyncio.gather(*tasks, return_exceptions=True)
        await gate.release(tokens, job)

    asyncio.ensure_future(wait())


def adapter_order(rows: pa.Table, digests: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The order to start rows in, and each position's group: its document, or its adapter and document where rows
    name adapters, so each adapter's rows run together."""
    n = len(digests)
    document = np.cumsum(np.concatenate(([0], digests[1:] != digests[:-1]))) if n else np.zeros(0, np.int64)
    if "adapter" not in rows.column_names or rows.column("adapter").null_count == n:
        return np.arange(n), document
    codes = rows.column("adapter").combine_chunks().fill_null("").dictionary_encode()
    adapter = codes.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.lexsort((np.arange(n), document, adapter))
    return order, (adapter * (int(document[-1]) + 1) + document)[order]


def _row_sampling(rows: pa.Table) -> list | None:
    """Each row's own ``Sampling``, or None when the table has no sampling columns. Rows were validated when
    read."""
    names = [c for c in ROW_COLUMNS if c in rows.column_names]
    if not names:
        return None
    return [checked(dict(zip(names, values))) for values in zip(*(rows.column(c).to_pylist() for c in names))]
