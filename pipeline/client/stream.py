"""One ``Pipeline.stream`` call: the client-side feed's I/O shell around its job state.

``JobState`` (pipeline/client/job_state.py, pure) takes events (rows read, a batch done or
failed, a shard lost, rejoined or gone) and gives instructions (submit a batch, cancel one,
emit rows). A ``StreamJob`` carries them out: it reads the input a chunk at a time, submits each
batch to its shard's worker as Arrow rows (pipeline/codec.py; the worker answers them as it
answers a cluster job's bucket), waits on the batches and the shard watch
(pipeline/client/recovery.py), and publishes the client's view for the dashboard page.
"""
from __future__ import annotations

import itertools
import time
import uuid
from typing import Any, Iterable, Iterator, Mapping

import dask
from distributed import KilledWorker, as_completed

from pipeline import codec
from pipeline.client.job_state import Cancel, Emit, JobState, Submit
from pipeline.client.recovery import ShardWatch
from pipeline.names import VIEW_METADATA_KEY
from pipeline.results import RowResult
from pipeline.sampling import Sampling
from pipeline.summary import GONE, LOST, REJOINED
from pipeline.worker.engine import EngineDead
from pipeline.worker.plugin import run_batch

# Rows read, split and tokenized at a time: large enough that the tokenizer batches well, small
# enough that the first batches go out soon.
READ_CHUNK_ROWS = 8192


class StreamJob:
    """The rows of one ``Pipeline.stream`` call, answered through ``pipeline``'s shards
    (its arguments are ``stream``'s)."""

    def __init__(self, pipeline, rows: Iterable[Mapping[str, Any]], task, sampling, truncate_prompts: bool,
                 watched: bool, rows_total: int | None):
        self.p = pipeline
        config = pipeline.config
        self.job_id = f"pipeline-job-{uuid.uuid4().hex[:12]}"
        rec = config.recovery
        if isinstance(sampling, Mapping):
            sampling = config.replace(sampling=dict(sampling)).sampling
        sampling = sampling or config.sampling
        self.job_sampling = sampling.as_sampling(config.engine.seed)
        self.task, self.truncate_prompts = task, truncate_prompts
        self.state = JobState(self.job_id,
                              pipeline._dispatcher(late_binding=config.routing.late_binding, watched=watched,
                                                   decode_tokens=sampling.max_tokens),
                              config.intake.read_ahead_rows, rec.max_row_attempts,
                              read_ahead_chars=config.intake.read_ahead_chars, fast_batch_s=config.intake.fast_batch_s)
        self.report = self.state.report
        self.report.rows_total = rows_total
        self.span = {"name": (self.job_id,), "ids": (str(uuid.uuid4()),)}  # one Dask span per job
        self.watch = ShardWatch(pipeline.client, {s.name: s.resource for s in config.shards},
                                rec.poll_interval_s, rec.rejoin_timeout_s)
        self.running = as_completed()
        self.futures: dict[str, tuple[Any, float]] = {}   # batch id -> its future, when it was submitted
        self.source = enumerate(rows)
        self.overrides: dict[int, Sampling] = {}   # unanswered row -> its own sampling settings
        self._view_published = 0.0

    def results(self) -> Iterator[RowResult]:
        """Each row's result once, as its batch completes. Left early (the caller stops
        iterating, or an error), its batches still on the cluster are cancelled: the workers
        stop answering them (pipeline/worker/plugin.py)."""
        try:
            yield from self._results()
        finally:
            if self.futures:
                self.p.client.cancel([fut for fut, _ in self.futures.values()])
                self.futures.clear()

    def _results(self) -> Iterator[RowResult]:
        state, running = self.state, self.running
        yield from self._read()
        while not state.finished:
            if not state.in_flight:
                if state.stalled:   # every live shard is full or gone: wait for the shards
                    yield from self._on_shard_events(self._wait_for(None))
                yield from self._read()
                continue
            yield from self._on_shard_events(self._wait_for(running))
            self._publish_view()
            while running.has_ready():
                fut = next(running)
                if fut.key not in self.futures:   # cancelled and re-routed
                    fut.release()
                    continue
                yield from self._batch_ended(fut)
                yield from self._read()
        self._publish_view(force=True)

    def _batch_ended(self, fut) -> Iterator[RowResult]:
        t0 = self.futures.pop(fut.key)[1]
        if fut.status == "finished":
            result = codec.decode_result(fut.result())
            fut.release()
            yield from self._carry_out(self.state.batch_done(fut.key, result.results, time.perf_counter() - t0))
        else:
            exc = fut.exception() if fut.status == "error" else None
            fut.release()
            error = f"{type(exc).__name__}: {exc}" if exc is not None else "batch cancelled"
            dead = isinstance(exc, EngineDead)
            if dead:
                self.p._forget_known(self._shard_of(fut.key))
            yield from self._carry_out(self.state.batch_failed(fut.key, error, engine_dead=dead,
                                                               killed_worker=isinstance(exc, KilledWorker)))

    def _carry_out(self, instructions: list) -> Iterator[RowResult]:
        for ins in instructions:
            if isinstance(ins, Emit):
                if self.overrides:
                    for r in ins.rows:
                        self.overrides.pop(r.index, None)
                yield from ins.rows
            elif isinstance(ins, Submit):
                with dask.annotate(span=self.span):
                    fut = self._submit(ins.batch_id, ins.shard, ins.groups)
                self.futures[ins.batch_id] = fut, time.perf_counter()
                self.running.add(fut)
            elif isinstance(ins, Cancel):
                self.futures.pop(ins.batch_id)[0].cancel()

    def _read(self) -> Iterator[RowResult]:
        state = self.state
        want = min(state.rows_wanted, READ_CHUNK_ROWS)
        if want:
            chunk = list(itertools.islice(self.source, want))
            yield from self._carry_out(state.rows_read(*self.p._read_rows(chunk, self.task, state.holds,
                                                                          self.overrides),
                                                       last=len(chunk) < want))

    def _rejoined(self, shard: str) -> list:
        self.p._forget_known(shard)
        return self.state.shard_rejoined(shard)

    def _on_shard_events(self, events) -> Iterator[RowResult]:
        state = self.state
        handlers = {LOST: state.shard_lost, REJOINED: self._rejoined, GONE: state.shard_gone}
        for ev in events:
            state.report.events.append(ev)
            yield from self._carry_out(handlers[ev.kind](ev.shard))

    def _shard_of(self, batch_id: str) -> str | None:
        batch = self.state.in_flight.get(batch_id)
        return batch.shard if batch is not None else None

    def _wait_for(self, running) -> list:
        """Wait until a batch completes or it is time to look at the workers again; returns
        the shard events seen."""
        watch = self.watch
        if running is None:
            time.sleep(watch.interval_s)
        else:
            # Checked under the condition's lock: as_completed queues a finished future, then
            # notifies under this lock, so a completion between check and wait is never missed.
            with running.thread_condition:
                if not running.has_ready():
                    running.thread_condition.wait(timeout=watch.interval_s)
        return watch.poll()

    def _publish_view(self, force: bool = False) -> None:
        """The client's view (router, job) for the dashboard page, at most once a poll interval."""
        now = time.monotonic()
        if not force and now - self._view_published < self.watch.interval_s:
            return
        self._view_published = now
        dispatcher, router, watch = self.state.dispatcher, self.p.router, self.watch
        view = {"job": self.report.as_dict(), "time": time.time(), "pending_rows": dispatcher.pending_rows,
                "shards": {s: {"rows_bound": dispatcher.in_flight[s], "documents_bound": dispatcher.prefixes_bound[s],
                               "prefix_blocks_held": router.blocks_held[s],
                               "outstanding_tokens": router.outstanding[s],
                               "routing": "out" if s in router.down else "in",
                               "worker": watch.workers.get(s)} for s in self.p.config.shard_names}}
        self.p.client.set_metadata(VIEW_METADATA_KEY, view)

    def _submit(self, batch_id: str, shard: str, groups: dict[str, list[tuple[int, str]]]):
        """One batch to ``shard``: its rows as Arrow (each prefix once, its rows after it, with
        their own sampling settings if any), compressed (pipeline/codec.py)."""
        config = self.p.config
        rows = codec.rows_of_groups(groups, self.overrides.get if self.overrides else None)
        header = codec.BatchHeader(batch_id=batch_id, truncate_prompts=self.truncate_prompts,
                                   sampling=self.job_sampling)
        payload = codec.encode_batch(codec.RowsBatch(header, rows), config.intake.compression_level)
        t = self.p.transfer
        t.batches += 1
        t.encoded_bytes += len(payload)
        t.raw_bytes += codec.raw_size(rows)
        t.per_shard_rows[shard] = t.per_shard_rows.get(shard, 0) + rows.num_rows
        resource = config.shard(shard).resource
        return self.p.client.submit(run_batch, payload, key=batch_id, resources={resource: 1}, pure=False)
