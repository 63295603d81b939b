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

import numpy as np
import pyarrow as pa

from pipeline.jobs.prompt_table import prefixes_of
from pipeline.worker.admission import TokenGate
from pipeline.results import RowResult
from pipeline.sampling import ROW_COLUMNS, checked
from pipeline.token_estimate import estimated_tokens

PROGRESS_EVERY_S = 1.0


async def answer_grouped(plugin, rows: pa.Table, bucket_id: str, sampling, truncate: bool,
                         progress=None, commit=None, commit_rows: int = 10_000,
                         commit_s: float = 30.0, first_rows: int = 0,
                         prefixes: dict[int, str] | None = None,
                         job: str | None = None) -> list[RowResult]:
    """One result per row of ``rows`` (position, digest, prefix, suffix, and the row's own
    sampling columns), in ``rows``' order. ``prefixes``: each document's prefix text by its
    digest (default: from the rows that carry it, ``prompt_table.prefixes_of``).
    ``progress(done_rows, error_rows)`` is called now and then, and at the end.
    ``commit(results)`` gets the results as they complete, at least ``commit_rows`` at a time or every ``commit_s`` seconds, and the rest at the end (in the
    loop's thread pool, so the engine's event loop goes on meanwhile); the first that fails stops
    the rows at once (those in flight aborted, no more started) and its error is raised. ``first_rows``: until the
    first answer, only this many requests are admitted (0: no limit), so that answer is not
    decoded in lockstep with a full engine's worth of others (``intake.first_answer_rows``, docs/configuration.md).
    ``job``: the job the rows belong to; jobs share the engine fairly (pipeline/worker/admission.py).
    At most ``2 x intake.max_in_flight`` rows wait for the engine at a time, and the token gate
    holds back documents."""
    engine, config = plugin.engine, plugin.config
    job = job or bucket_id   # whose turn it is at the engine (pipeline/worker/admission.py)
    n = rows.num_rows
    positions = rows.column("position").to_numpy()
    digests = rows.column("digest").to_numpy()
    suffixes = rows.column("suffix").to_pylist()
    if prefixes is None:
        prefixes = prefixes_of(rows)
    own = _row_sampling(rows)
    starts = np.flatnonzero(np.concatenate(([True], digests[1:] != digests[:-1]))) if n else np.array([], int)
    ends = np.append(starts[1:], n)
    decode = sampling.max_tokens or config.sampling.max_tokens
    # each document's questions, in estimated tokens (with their answers), for the token gate
    asked = np.add.reduceat(estimated_tokens(np.fromiter(map(len, suffixes), np.int64, n)) + decode,
                            starts).tolist() if n else []
    gate = plugin.token_gate
    window = 2 * config.intake.max_in_flight   # rows started, not yet answered
    waiting = 0          # rows started that wait for the engine
    room = asyncio.Event()
    results: list[RowResult | None] = [None] * n
    done = errors = 0
    last = time.monotonic()
    failure: list[BaseException] = []
    answered_one = asyncio.Event()
    loop = asyncio.get_running_loop()
    ready: list[RowResult] = []          # answered, not yet handed to commit
    commits: list[asyncio.Future] = []
    committed_at = time.monotonic()

    def hand_over() -> None:
        nonlocal ready, committed_at
        if commit is not None and ready and not failure:
            future = loop.run_in_executor(None, committing, ready)
            future.add_done_callback(commit_done)
            commits.append(future)
        ready, committed_at = [], time.monotonic()

    def committing(rows: list[RowResult]) -> None:
        """(In an executor thread.) A failed commit is seen at once by the loop that starts rows,
        even where it never waits (an engine that answers at once): no more rows start."""
        try:
            commit(rows)
        except BaseException as exc:  # noqa: BLE001 - raised by the caller once the others stop
            failure.append(exc)
            raise

    def commit_done(future: asyncio.Future) -> None:
        """A failed commit stops the answering: the requests in flight are aborted (what they
        would answer could not be committed). Its exception is retrieved here, so none goes unseen."""
        if not future.cancelled() and future.exception() is not None:
            for task in list(tasks):
                task.cancel()

    def answered(k: int, r: RowResult) -> None:
        nonlocal done, errors, last
        results[k] = r
        answered_one.set()
        ready.append(r)
        now = time.monotonic()
        if len(ready) >= commit_rows or now - committed_at >= commit_s:
            hand_over()
        done += 1
        errors += r.error is not None
        if progress is not None and (now - last >= PROGRESS_EVERY_S or done == 1):
            last = now
            progress(done, errors)

    def settled(k: int, task: asyncio.Task) -> None:
        """A row that waited for the engine is answered (or failed, or was cancelled). Once the
        answering has stopped, nothing more is handed to ``commit`` (a row answered just before
        is answered again by the task's rerun, never written twice)."""
        nonlocal waiting
        waiting -= 1
        room.set()
        if task.cancelled() or stopped:
            return
        try:
            answered(k, task.result())
        except BaseException as exc:  # noqa: BLE001 - raised by the caller once the others stop
            failure.append(exc)

    tasks: set[asyncio.Task] = set()
    stopped = False
    try:
        for lo, hi, questions in zip(starts.tolist(), ends.tolist(), asked):
            if failure:
                break
            prefix = prefixes[int(digests[lo])]
            prefix_ids = engine.encode(prefix)
            if plugin.prefixes is not None:
                plugin.prefixes.served_digest(int(digests[lo]), len(prefix_ids))   # (the rows' digest is the prefix's)
            tokens = len(prefix_ids) + questions
            if gate is not None:
                await gate.acquire(tokens, job)
            document: list[asyncio.Task] = []
            for k in range(lo, hi):
                if first_rows and k >= first_rows and not answered_one.is_set():
                    await answered_one.wait()
                while waiting >= window:
                    room.clear()
                    await room.wait()
                if failure:   # (a commit failed meanwhile)
                    break
                s = own[k] if own is not None else None
                try:
                    task, r = start_eagerly(plugin._one(job, bucket_id, int(positions[k]), prefix_ids, suffixes[k], truncate,
                                                        s.over(sampling) if s is not None else sampling))
                    if task is None:
                        answered(k, r)
                        continue
                except BaseException as exc:  # noqa: BLE001 - raised by the caller once the others stop
                    failure.append(exc)
                    break
                waiting += 1
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                task.add_done_callback(functools.partial(settled, k))
                document.append(task)
            if gate is not None:
                _release_when_done(gate, tokens, job, document)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
    except BaseException:   # (cancelled: Dask released the task; the rows started stop too)
        stopped = True
        for task in list(tasks):
            task.cancel()
        raise
    if failure:
        await asyncio.gather(*commits, return_exceptions=True)
        raise failure[0]
    hand_over()
    await asyncio.gather(*commits)
    if progress is not None:
        progress(done, errors)
    return results


def start_eagerly(coro) -> tuple[asyncio.Task | None, object]:
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


def _row_sampling(rows: pa.Table) -> list | None:
    """Per row: its own sampling settings (a ``Sampling``) or None. (Checked when the row was
    read: a row whose settings are not valid never gets here.)"""
    names = [c for c in ROW_COLUMNS if c in rows.column_names]
    if not names:
        return None
    return [checked(dict(zip(names, values))) for values in zip(*(rows.column(c).to_pylist() for c in names))]

