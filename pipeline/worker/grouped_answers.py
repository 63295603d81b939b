"""Runs on a shard's worker: rows answered by the resident engine, grouped by document: a
cluster job's bucket.

The rows come sorted by document. Each document's prefix is tokenized once and its questions
are admitted one after the other, so they reach the engine together and the document is
prefilled once; documents follow one another, so none is evicted between its own questions.
The engine takes the worker's ``intake.max_in_flight`` requests at a time. A bucket's admission
is bounded besides: (``TokenGate``) no new document while the requests in flight hold
``intake.kv_budget_share`` of the engine's KV cache. Progress goes to the job's event topic as rows complete.
"""

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
# Answers go to ``commit`` (in the loop's thread pool) this many at a time, or this often: a hand-over,
# not a buffer. When they are written is the commit's choice (pipeline/data/answer_files.py BucketCommits).
HAND_OVER_ROWS = 4096
HAND_OVER_S = 0.25
T = TypeVar("T")


async def answer_grouped(
    plugin,
    rows: pa.Table,
    bucket_id: str,
    sampling,
    truncate: bool,
    progress=None,
    commit=None,
    first_rows: int = 0,
    prefixes: dict[int, str] | None = None,
    job: str | None = None,
    embed: bool = False,
    labels: tuple[str, ...] | None = None,
) -> list[RowResult]:
    """One result per row of ``rows`` (position, digest, prefix, suffix, and the row's own
    sampling columns), in ``rows``' order. ``prefixes``: each document's prefix text by its
    digest (default: from the rows that carry it, ``prefixes_of``).
    ``progress(done_rows, error_rows, tokens)`` is called now and then, and at the end (``tokens``:
    the prompt, cached and completion tokens of the rows done).
    ``commit(results)`` gets the results as they complete, a few thousand at a time or four times a
    second, and the rest at the end (in the loop's thread pool, so the engine's event loop goes
    on meanwhile; ``commit`` decides when they are written); the first that fails stops the
    rows at once (those in flight aborted, no more started) and its error is raised.
    ``first_rows``: until the first answer, only this many requests are admitted (0: no limit),
    so that answer is not decoded in lockstep with a full engine's worth of others
    (``intake.first_answer_rows``, docs/configuration.md).
    ``job``: the job the rows belong to; jobs share the engine fairly
    (pipeline/worker/admission.py). At most ``2 x intake.max_in_flight`` rows wait for the engine
    at a time, and the token gate holds back documents. ``embed``: the rows are texts to embed
    (their prefix and suffix; ``plugin.embed_row``), not prompts to answer (``plugin.answer_row``);
    ``labels``: the rows' prompts weigh these labels (task classify / score; ``plugin.classify_row``)."""
    book = Bookkeeping(rows.num_rows, progress, commit)
    admission = Admission(
        plugin,
        rows,
        bucket_id,
        job or bucket_id,
        sampling,
        truncate,
        first_rows,
        prefixes if prefixes is not None else prefixes_of(rows),
        book,
        embed,
        labels,
    )
    try:
        await admission.run()
    except BaseException:  # (cancelled: Dask released the task; the rows started stop too)
        book.stop()
        await book.settle()  # (what was handed to commit is written, or not, before the task ends)
        raise
    return await book.finish()


def prefixes_of(rows: pa.Table) -> dict[int, str]:
    """Each document's prefix text by its digest, from the rows that carry it (a prompt table
    carries a document's prefix on its first row only: pipeline/steps/prompt_table.py)."""
    carriers = rows.filter(pc.is_valid(rows.column("prefix")))
    return dict(zip(carriers.column("digest").to_pylist(), carriers.column("prefix").to_pylist()))


class Bookkeeping:
    """A bucket's results as they come: kept in the rows' order, handed to ``commit`` as they
    come (``HAND_OVER_ROWS`` at a time, or every ``HAND_OVER_S``; in the loop's thread pool),
    progress reported; the first failure (a row's or a commit's) kept, and a failed commit
    stops the rows in flight (``tasks``)."""

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
        """A row that waited for the engine is answered (or failed, or was cancelled). Once the
        answering has stopped, nothing more is handed to ``commit`` (a row answered just before
        is answered again by the task's rerun, never written twice)."""
        if task.cancelled() or self.stopped:
            return
        try:
            self.answered(k, task.result())
        except BaseException as exc:  # noqa: BLE001 - raised by the caller once the others stop
            self.failure.append(exc)

    def stop(self) -> None:
        """The answering was cancelled: the rows in flight stop too; those answered are handed to
        ``commit`` (they were counted as answered: a batch let go keeps them)."""
        self._hand_over()
        self.stopped = True
        for task in list(self.tasks):
            task.cancel()

    async def settle(self) -> None:
        """The commits handed over have ended (written or failed): once the answering is over,
        nothing of it is written later (a rerun reads the answer files as they stay)."""
        await asyncio.gather(*self._commits, return_exceptions=True)

    async def finish(self) -> list[RowResult]:
        """Every row started has ended: the failure, if any, raised; else the rest committed."""
        if self.failure:
            await self.settle()
            raise self.failure[0]
        self._hand_over()
        await asyncio.gather(*self._commits)
        if self.progress is not None:
            self.progress(self.done, self.errors, self.tokens)
        return cast("list[RowResult]", self.results)  # (every row answered: else a failure, raised above)

    def _hand_over(self) -> None:
        if self.commit is not None and self._ready and not self.failure:
            future = self._loop.run_in_executor(None, self._committing, self._ready)
            future.add_done_callback(self._commit_done)
            self._commits.append(future)
        self._ready, self._committed_at = [], time.monotonic()

    def _committing(self, rows: list[RowResult]) -> None:
        """(In an executor thread.) A failed commit is seen at once by the loop that starts rows,
        even where it never waits (an engine that answers at once): no more rows start."""
        try:
            self.commit(rows)
        except BaseException as exc:  # noqa: BLE001 - raised by the caller once the others stop
            self.failure.append(exc)
            raise

    def _commit_done(self, future: asyncio.Future) -> None:
        """A failed commit stops the answering: the requests in flight are aborted (what they
        would answer could not be committed). Its exception is retrieved here, so none goes unseen."""
        if not future.cancelled() and future.exception() is not None:
            for task in list(self.tasks):
                task.cancel()


class Admission:
    """A bucket's rows started on the engine, a document at a time: its prefix tokenized once,
    its questions one after the other; no new document while the token gate says the engine's
    KV cache is spoken for; at most ``2 x intake.max_in_flight`` rows waiting; until the first
    answer, ``first_rows`` of them. Each result goes to ``book``."""

    def __init__(
        self,
        plugin,
        rows: pa.Table,
        bucket_id: str,
        job: str,
        sampling,
        truncate: bool,
        first_rows: int,
        prefixes: dict[int, str],
        book: Bookkeeping,
        embed: bool = False,
        labels: tuple[str, ...] | None = None,
    ):
        self.embed, self.labels = embed, labels
        self.plugin, self.bucket_id, self.job, self.sampling, self.truncate = plugin, bucket_id, job, sampling, truncate
        self.first_rows, self.prefixes, self.book = first_rows, prefixes, book
        n = rows.num_rows
        self.positions = rows.column("position").to_numpy()
        self.digests = rows.column("digest").to_numpy()
        self.suffixes = rows.column("suffix").to_pylist()
        self.own = _row_sampling(rows)
        # the rows in the order they start: by document, and by adapter first where rows name adapters
        # (an engine applies a few adapters in one step: each adapter's rows together)
        self.order, group = adapter_order(rows, self.digests)
        starts = np.flatnonzero(np.concatenate(([True], group[1:] != group[:-1]))) if n else np.array([], int)
        decode = 1 if labels else sampling.max_tokens or plugin.config.sampling.max_tokens
        # each document's rows, and its questions in estimated tokens (with their answers), for the token gate
        asked: list[int] = []
        if n:
            suffix_tokens = estimated_tokens(np.fromiter(map(len, self.suffixes), np.int64, n))[self.order]
            asked = np.add.reduceat(suffix_tokens + decode, starts).tolist()
        self.documents = list(zip(starts.tolist(), np.append(starts[1:], n).tolist(), asked))
        self.window = 2 * plugin.config.intake.max_in_flight  # rows started, not yet answered
        self.waiting = 0  # rows started that wait for the engine
        self.room = asyncio.Event()

    async def run(self) -> None:
        """Every row started (or a failure seen); returns once every row started has ended."""
        # (an embedding keeps nothing in the KV cache once computed, and an encoder model has none)
        gate = None if self.embed else self.plugin.token_gate
        for lo, hi, questions in self.documents:
            if self.book.failure:
                break
            digest = int(self.digests[self.order[lo]])
            prefix_ids = self.plugin.engine.encode(self.prefixes[digest])
            if self.plugin.prefixes is not None:  # (the rows' digest is the prefix's)
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
        """Rows ``lo``..``hi`` in start order (one document's) started; those that wait for the engine."""
        book, started = self.book, []
        for i in range(lo, hi):
            k = int(self.order[i])
            if self.first_rows and i >= self.first_rows and not book.answered_one.is_set():
                await book.answered_one.wait()
            while self.waiting >= self.window:
                self.room.clear()
                await self.room.wait()
            if book.failure:  # (a commit failed meanwhile)
                break
            s = self.own[k] if self.own is not None else None
            try:
                sampling = s.over(self.sampling) if s is not None else self.sampling
                task, r = start_eagerly(self._request(k, prefix_ids, sampling))
                if task is None:
                    assert r is not None  # (finished at once: its result)
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
        """Row ``k``'s request: an embedding, labels weighed, or an answer."""
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
    """Run ``coro`` at once, up to its first real wait; then a Task runs the rest: (that Task,
    None), or (None, its result) where it finished without waiting. What Python 3.12's eager
    tasks do: a request the engine answers at once (the fake engine) costs no Task and no trip
    round the event loop."""
    try:
        waiting_for = coro.send(None)
    except StopIteration as stop:
        return None, stop.value
    return asyncio.ensure_future(_Started(coro, waiting_for)), None


class _Started(collections.abc.Coroutine):
    """A coroutine already started (now waiting for ``waiting_for``), as a Task runs it: the
    Task's first step waits for what it waits for, then each step goes on to it. A Task
    cancelled before its first step throws the cancellation into the coroutine itself, so the
    coroutine stops where it waits (a request in flight is aborted, its ``finally`` runs), rather
    than being left suspended with the Task gone."""

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
    """The order to start ``rows`` in (sorted by document, ``digests``), and each place's group (a
    number per document, or per adapter and document where rows name adapters): each adapter's rows
    together, in the order the adapters first appear, documents in their order within each."""
    n = len(digests)
    document = np.cumsum(np.concatenate(([0], digests[1:] != digests[:-1]))) if n else np.zeros(0, np.int64)
    if "adapter" not in rows.column_names or rows.column("adapter").null_count == n:
        return np.arange(n), document
    codes = rows.column("adapter").combine_chunks().fill_null("").dictionary_encode()
    adapter = codes.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.lexsort((np.arange(n), document, adapter))
    return order, (adapter * (int(document[-1]) + 1) + document)[order]


def _row_sampling(rows: pa.Table) -> list | None:
    """Per row: its own sampling settings (a ``Sampling``) or None. (Checked when the row was
    read: a row whose settings are not valid never gets here.)"""
    names = [c for c in ROW_COLUMNS if c in rows.column_names]
    if not names:
        return None
    return [checked(dict(zip(names, values))) for values in zip(*(rows.column(c).to_pylist() for c in names))]
