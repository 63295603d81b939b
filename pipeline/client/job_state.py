"""One job's state, as a pure state machine: events in, instructions out. No Dask, no clock,
no files -- the seam Dask's worker state machine and vLLM v1's output processor use.

The I/O shell (``Pipeline.stream``) reads rows, waits on batch futures and the shard watch,
tells the state what happened through one handler per event, and carries out the
instructions each handler returns:

    events (handlers)                         instructions
    rows_read(rows, last=)  rows read, split   Submit(batch_id, shard, groups)  run a batch
    input_ended()      no more rows           Cancel(batch_id)                 drop a batch
    batch_done(id, results)                   Emit(rows)                       rows' results
    batch_failed(id, error, engine_dead=, killed_worker=)
    shard_lost / shard_rejoined / shard_gone(shard)

Rules (what the tests drive with synthetic events): every row is emitted exactly once; a row
is sent at most ``max_row_attempts`` times, then emitted with a ``worker`` error; a batch
that killed its workers (``KilledWorker``) is not sent again; a shard given up on has its
batches cancelled and their unanswered rows re-routed to the others; a result that comes
back for a row already answered (a late batch after a re-route) is dropped and counted.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pipeline.client.dispatch import Dispatcher
from pipeline.results import ErrorKind, RowResult
from pipeline.client.router import Prefix
from pipeline.summary import JobSummary


@dataclass(frozen=True)
class Submit:
    batch_id: str
    shard: str
    groups: dict[str, list[tuple[int, str]]]   # prefix -> [(row index, suffix)]


@dataclass(frozen=True)
class Cancel:
    batch_id: str


@dataclass(frozen=True)
class Emit:
    rows: list[RowResult]   # answered, ids filled in


@dataclass(frozen=True)
class ReadRow:
    """A row as the shell read and split it: its prompt parts, or why it has none."""
    index: int
    id: Any
    prefix: str | None = None
    suffix: str | None = None
    error: str | None = None        # an input error: the row is answered with it at once


@dataclass
class _InFlight:
    shard: str
    groups: dict[str, list[tuple[int, str]]]


@dataclass
class JobState:
    job_id: str
    dispatcher: Dispatcher
    read_ahead_rows: int
    max_row_attempts: int
    report: JobSummary = None   # what happened: rows, errors, tokens, batches, re-routes
    fast_batch_s: float = 0.0
    read_ahead_chars: int = 0   # 0: rows alone bound the read-ahead
    ids: dict[int, Any] = field(default_factory=dict)          # unanswered row -> its id
    attempts: dict[int, int] = field(default_factory=dict)     # unanswered row -> times sent
    in_flight: dict[str, _InFlight] = field(default_factory=dict)
    input_done: bool = False
    _prefixes: dict[str, Prefix] = field(default_factory=dict)  # prefix -> its Prefix, while a row needs it
    _refs: dict[str, int] = field(default_factory=dict)          # prefix -> its unanswered rows
    _batches: int = 0

    def __post_init__(self) -> None:
        if self.report is None:
            self.report = JobSummary(job=self.job_id)

    # -- queries --------------------------------------------------------------------
    @property
    def router(self):
        return self.dispatcher.router

    @property
    def rows_wanted(self) -> int:
        """Rows the shell should read now: the read-ahead window's room (in rows, and in
        characters at this job's characters per row so far), once at least half of it is free
        (so rows are read, split and tokenized in large chunks, not a batch's worth at a time)."""
        d = self.dispatcher
        pending = d.pending_rows
        if self.input_done or pending > self.read_ahead_rows // 2:
            return 0
        want = self.read_ahead_rows - pending
        if self.read_ahead_chars and d.rows_added:
            if d.pending_chars > self.read_ahead_chars // 2:
                return 0
            per_row = d.chars_added / d.rows_added   # this job's rows so far
            want = min(want, max(1, int((self.read_ahead_chars - d.pending_chars) / per_row)))
        return want

    def holds(self, prefix: str) -> bool:
        """The state knows this prefix already (no need to tokenize it again)."""
        return prefix in self._prefixes

    @property
    def finished(self) -> bool:
        return self.input_done and not self.in_flight and not self.dispatcher.pending_rows

    @property
    def stalled(self) -> bool:
        """Rows wait, none is in flight: every live shard is full or gone (wait for the shards)."""
        return not self.in_flight and bool(self.dispatcher.pending_rows)

    # -- events ---------------------------------------------------------------------
    def rows_read(self, rows: list[ReadRow], prefixes: dict[str, Prefix], last: bool = False) -> list:
        """Rows read from the input, split into prompt parts; ``prefixes``: the ``Prefix`` of
        each prefix the state does not hold yet. ``last``: the input ended with these rows (as
        ``input_ended``, before they are bound)."""
        failed: list[RowResult] = []
        self.report.rows_read += len(rows)
        ids, known, refs, add = self.ids, self._prefixes, self._refs, self.dispatcher.add
        for r in rows:
            ids[r.index] = r.id
            if r.error is not None:
                failed.append(self._failed(r.index, ErrorKind.INPUT, r.error))
                continue
            prefix = r.prefix
            info = known.get(prefix)
            if info is None:
                info = known[prefix] = prefixes[prefix]
            refs[prefix] = refs.get(prefix, 0) + 1
            add(r.index, prefix, r.suffix, info)
        if last:
            self._ended()
        return ([Emit(failed)] if failed else []) + self._bind()

    def input_ended(self) -> list:
        self._ended()
        return self._bind()

    def _ended(self) -> None:
        self.input_done = self.dispatcher.input_ended = True
        self.report.rows_total = self.report.rows_read

    def batch_done(self, batch_id: str, results: list, elapsed_s: float | None = None) -> list:
        """A batch's results (``RowResult``s without ids, one per row it carried);
        ``elapsed_s``: its round trip. A batch of at least a quarter ``batch_size`` rows back within
        ``fast_batch_s`` per ``batch_size`` rows means the engine is fast: batches grow
        (``Dispatcher.grow``)."""
        batch = self.in_flight.pop(batch_id, None)
        if batch is None:   # cancelled and re-routed: its rows are answered elsewhere
            self.report.duplicates_dropped += len(results)
            return []
        d = self.dispatcher
        # (a quarter batch counts too: partial batches are what a job gets while it is slow, and
        # then they would never let it speed up -- seen as runs stuck at half the rows/s)
        if elapsed_s is not None and 4 * len(results) >= d.batch_size and \
                elapsed_s < self.fast_batch_s * len(results) / d.batch_size:
            d.grow()
        ids, attempts = self.ids, self.attempts
        fresh = [r for r in results if r.index in ids]   # not answered yet
        self.report.duplicates_dropped += len(results) - len(fresh)
        for prefix, items in batch.groups.items():
            self._release(prefix, sum(1 for i, _ in items if i in ids))
        d.completed([r.index for r in fresh])
        for r in fresh:
            r.id = ids.pop(r.index)
            attempts.pop(r.index, None)
        add = self.report.add
        for r in fresh:
            add(r)
        out: list = [Emit(fresh)] if fresh else []
        return out + self._bind()

    def batch_failed(self, batch_id: str, error: str, *, engine_dead: bool = False,
                     killed_worker: bool = False) -> list:
        """A batch's task failed. ``engine_dead``: its shard's engine died (a fresh one will
        hold nothing); ``killed_worker``: it killed every worker that ran it -- its rows are
        not sent again."""
        batch = self.in_flight.pop(batch_id, None)
        if batch is None:
            return []
        self.report.batches_failed += 1
        if engine_dead:
            self.forget_cache(batch.shard)
        if killed_worker:
            for items in batch.groups.values():
                self.attempts.update({i: self.max_row_attempts for i, _ in items})
        return self._send_again(batch, error) + self._bind()

    def shard_lost(self, shard: str) -> list:
        """Its worker left; Dask runs its batches again once the nanny has restarted it."""
        self.report.batches_interrupted += sum(b.shard == shard for b in self.in_flight.values())
        return []

    def shard_rejoined(self, shard: str) -> list:
        """A new worker serves it: a fresh engine, nothing of the shard's cache is left."""
        self.router.set_down(shard, False)
        self.forget_cache(shard)
        return self._bind()

    def shard_gone(self, shard: str) -> list:
        """No worker came back in time: re-route its rows (unless it is the last live shard)."""
        if len(self.router.live_shards) <= 1 or shard in self.router.down:
            return []
        self.router.set_down(shard)
        out: list = []
        for batch_id, batch in list(self.in_flight.items()):
            if batch.shard == shard:
                del self.in_flight[batch_id]
                out.append(Cancel(batch_id))
                out += self._send_again(batch, f"shard {shard} lost its worker")
        return out + self._bind()

    # -- helpers --------------------------------------------------------------------
    def forget_cache(self, shard: str) -> None:
        """The shard's engine is new: the router forgets what it held, not the work it owes."""
        owed = self.router.outstanding[shard]
        self.router.forget_shard(shard)
        self.router.outstanding[shard] = owed

    def _bind(self) -> list:
        out = []
        running = Counter(b.shard for b in self.in_flight.values()) if self.dispatcher.input_ended else None
        for shard, groups in self.dispatcher.bind(running):
            for items in groups.values():
                for i, _ in items:
                    self.attempts[i] = self.attempts.get(i, 0) + 1
            self._batches += 1
            batch_id = f"{self.job_id}-batch-{self._batches}"
            self.in_flight[batch_id] = _InFlight(shard, groups)
            self.report.batches += 1
            out.append(Submit(batch_id, shard, groups))
        return out

    def _send_again(self, batch: _InFlight, error: str) -> list:
        """The batch's unanswered rows go back through the router; rows sent too often fail."""
        rows = [(i, prefix, suffix) for prefix, items in batch.groups.items() for i, suffix in items
                if i in self.ids]
        self.dispatcher.completed([i for i, _, _ in rows])
        failed: list[RowResult] = []
        for i, prefix, suffix in rows:
            if self.attempts[i] >= self.max_row_attempts:
                self.report.rows_failed += 1
                self._release(prefix)
                failed.append(self._failed(i, ErrorKind.WORKER, error))
            else:
                self.report.rows_rerouted += 1
                self.dispatcher.add(i, prefix, suffix, self._prefixes[prefix])
        return [Emit(failed)] if failed else []

    def _failed(self, index: int, kind: ErrorKind, message: str) -> RowResult:
        """The row is answered with an error: forget it (a row is unanswered while its id is held)."""
        self.attempts.pop(index, None)
        result = RowResult.failed(index, kind, message, id=self.ids.pop(index))
        self.report.add(result)
        return result

    def _release(self, prefix: str, rows: int = 1) -> None:
        """``rows`` of the prefix's rows are answered; the prefix is forgotten with its last."""
        if not rows:
            return
        left = self._refs[prefix] - rows
        if left:
            self._refs[prefix] = left
        else:
            del self._refs[prefix]
            del self._prefixes[prefix]
