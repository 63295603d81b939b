"""Which rows go to which shard, and when: the pipeline's pure scheduling core (no Dask).

Rows wait in per-prefix groups, in order of first appearance, so the questions on a
document always travel together even when they are scattered through the input
(grouping within the read-ahead window). A group is bound to a shard only when the
least-loaded shard has room for more work (late binding): no shard is handed a
document it cannot start soon, so the shards finish together instead of one idling
while another still has a static share to work through. Once a prefix is bound,
the router keeps its later questions on its shard.

First answer fast: until the job's first batch has come back, only ``first_rows`` rows per
shard are bound (the first row of each of the first groups; the rest of a group waits and
follows it later), so the first answers are not decoded in lockstep with a full engine's
worth of others (on the 2-core box: 0.4 s for one request alone, ~3 s for 32 at once);
then the shards fill up. ``first_rows=0`` turns it off.

Once the input has ended (``input_ended``) and every row left fits in the shards' queues together
(``queue_per_shard`` times the live shards, counting the rows in flight), the rest is bound at
once, each group where the router places it by the figures of now: what a client that routes
the whole burst up front does. Holding those rows back would only place them later on staler
figures: a shard's work is released when its batch comes back, so between batches the router
counts as outstanding what the engine has done (six skewed 256-row benchmark bursts simulated
with the router's estimates, scripts/binding_sim.py: the shards finished 7.8-14.8 % apart
placed late, 0.3-1.8 % at once). Those last rows go in as few batches as the shard's worker has
free slots for (``worker_slots``, intake.concurrent_batches, less its batches running), not
cut at ``batch_size``: a batch beyond the slots would start only once a whole other batch had
ended (a 256-row skewed burst bound at once gave a shard 5 batches of at most 32 for 4 slots).

With ``late_binding=False`` every row is bound at once (a static split, as a client
that routes a whole burst up front would do). With ``group=False`` rows are bound in
arrival order, one by one (to measure what grouping buys).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Mapping, Sequence

from pipeline.client.router import Prefix, PrefixRouter, Route
from pipeline.token_estimate import estimated_tokens

# shard -> (prefix -> [(row index, suffix)]): one batch's worth of bound rows
Bound = tuple[str, dict[str, list[tuple[int, str]]]]


def _suffix_tokens(suffix: str) -> int:
    """Close enough for a load estimate (pipeline/token_estimate.py)."""
    return estimated_tokens(len(suffix))


class Dispatcher:
    def __init__(self, router: PrefixRouter, batch_size: int, queue_per_shard: int,
                 decode_tokens: int = 0, late_binding: bool = True, group: bool = True,
                 token_budget: dict[str, float] | None = None, first_rows: int = 0, worker_slots: int = 0):
        self.router = router
        self.shards: Sequence[str] = router.shards
        self.batch_size = batch_size
        self.queue_per_shard = queue_per_shard
        self.decode_tokens = decode_tokens
        self.late_binding = late_binding
        self.group = group
        # With late binding, a shard also stops taking work once its outstanding tokens
        # (prefixes it must hold + suffixes + decodes) reach its budget: a shard is never
        # handed more than its KV cache holds, so a document is not evicted before its
        # questions have run.
        self.token_budget = token_budget or {}
        self.first_rows = first_rows
        # batches a shard's worker runs at once (intake.concurrent_batches; 0: not known)
        self.worker_slots = worker_slots
        self.scale = 1          # batches and the per-shard queue, as a multiple of the configured sizes
        self.input_ended = False   # no more rows will be added (the rows pending are the last)
        self.answered = False   # a batch of this job has come back
        self._first_bound: set[tuple[str, str]] = set()   # (prefix, shard) bound before it
        # key (the prefix, or the row index without grouping) -> (prefix, tokens, rows)
        self._pending: OrderedDict = OrderedDict()
        self.pending_rows = 0
        self.pending_chars = 0   # prompt text waiting unbound, each prefix counted once
        self.rows_added = self.chars_added = 0
        self._buffers: dict[str, dict[str, list[tuple[int, str]]]] = {s: {} for s in self.shards}
        self._buffered = dict.fromkeys(self.shards, 0)
        self.in_flight = dict.fromkeys(self.shards, 0)  # bound and not yet completed
        self.routes: dict[int, Route] = {}
        self.prefixes_bound = dict.fromkeys(self.shards, 0)  # documents bound to each shard (this job)

    def add(self, index: int, prefix: str, suffix: str, prefix_tokens: list[int] | Prefix) -> None:
        """Queue one row; rows with the same prefix wait (and will travel) together.
        ``prefix_tokens``: the prefix's tokens, or its ``Prefix`` (pass the same one for every
        row of a prefix: nothing is recomputed)."""
        key = prefix if self.group else index
        entry = self._pending.get(key)
        chars = len(suffix)
        if entry is None:
            info = prefix_tokens if isinstance(prefix_tokens, Prefix) else \
                Prefix.of(prefix_tokens, self.router.block_size)
            self._pending[key] = entry = (prefix, info, [])
            chars += len(prefix)
        entry[2].append((index, suffix))
        self.pending_rows += 1
        self.pending_chars += chars
        self.rows_added += 1
        self.chars_added += chars

    def grow(self, max_scale: int = 32) -> None:
        """The engine is fast: twice the rows per batch and per shard queue (up to
        ``max_scale`` times the configured sizes), so per-batch costs (Dask, compression) are
        spread over more rows."""
        self.scale = min(max_scale, self.scale * 2)

    def bind(self, running: Mapping[str, int] | None = None) -> list[Bound]:
        """Bind waiting groups while the least-loaded shard has room; return full batches, and
        a shard's partial batch when no rows wait or the shard has no batch running (so a
        bound row never waits for rows that will not come, and a busy shard gets full batches).
        ``running``: each shard's batches sent and not yet back (sizes the last batches)."""
        if self.first_rows and not self.answered and self.late_binding:
            return self._bind_first()
        out: list[Bound] = []
        router, pending, in_flight, buffered = self.router, self._pending, self.in_flight, self._buffered
        outstanding, live = router.outstanding, router.live_shards
        queue, batch = self.queue_per_shard * self.scale, self.batch_size * self.scale
        no_budget = float("inf")
        # the last rows fit in the queues together: no shard's own queue holds them back, and
        # they are cut into batches once all are placed (``_last_batches``)
        last_fit = self.late_binding and self.input_ended and \
            self.pending_rows + sum(in_flight.values()) <= queue * len(live)
        cut = no_budget if last_fit else batch
        while pending:
            least = min(live, key=outstanding.__getitem__)
            if self.late_binding and ((in_flight[least] >= queue and not last_fit) or (
                    in_flight[least] and outstanding[least] >= self.token_budget.get(least, no_budget))):
                break
            _, (prefix, info, items) = pending.popitem(last=False)
            self.pending_rows -= len(items)
            self.pending_chars -= len(prefix) + sum(len(suffix) for _, suffix in items)
            bound_to: set[str] = set()
            routes = router.route_rows(info, [_suffix_tokens(suffix) for _, suffix in items], self.decode_tokens)
            for (index, suffix), route in zip(items, routes):
                shard = self._place(index, prefix, suffix, route, bound_to)
                if buffered[shard] >= cut:
                    out.append(self._take(shard))
        if last_fit:
            for s in self.shards:
                if buffered[s]:
                    out.extend(self._last_batches(s, batch, (running or {}).get(s, 0)))
            return out
        out.extend(self._take(s) for s in self.shards if self._buffered[s] and (
            not self._pending or not self.late_binding or self.in_flight[s] == self._buffered[s]))
        return out

    def _last_batches(self, shard: str, batch: int, running: int) -> list[Bound]:
        """The shard's last rows in near-equal batches, as many as its worker has slots free
        (``worker_slots`` less the ``running`` batches) and no more than batches of ``batch``
        rows would be: a batch beyond the worker's slots would wait for a whole other batch to
        end before its rows reached the engine. No slot free (or none known): batches of at most
        ``batch`` rows, as while the input lasts."""
        rows = self._buffered[shard]
        pieces = -(-rows // batch)
        if self.worker_slots > running:
            pieces = min(pieces, self.worker_slots - running)
        _, groups = self._take(shard)
        if pieces == 1:
            return [(shard, groups)]
        out: list[Bound] = []
        size, extra = divmod(rows, pieces)
        piece: dict[str, list[tuple[int, str]]] = {}
        room = size + (extra > 0)
        for prefix, items in groups.items():
            while items:
                taken, items = items[:room], items[room:]
                piece.setdefault(prefix, []).extend(taken)
                room -= len(taken)
                if not room:
                    out.append((shard, piece))
                    piece = {}
                    room = size + (len(out) < extra)
        if piece:
            out.append((shard, piece))
        return out

    def _bind_first(self) -> list[Bound]:
        """Before the job's first answer: the first row of each of the first groups, up to
        ``first_rows`` per live shard in all; the rest of each group waits in its place."""
        quota = self.first_rows * len(self.router.live_shards) - sum(self.in_flight.values())
        for key in list(self._pending)[:max(0, quota)]:
            prefix, info, items = self._pending[key]
            index, suffix = items.pop(0)
            self.pending_chars -= len(suffix)
            if not items:
                del self._pending[key]
                self.pending_chars -= len(prefix)
            self.pending_rows -= 1
            route, = self.router.route_rows(info, [_suffix_tokens(suffix)], self.decode_tokens)
            shard = self._place(index, prefix, suffix, route, set())
            self._first_bound.add((prefix, shard))
        return [self._take(s) for s in self.shards if self._buffered[s]]

    def _place(self, index: int, prefix: str, suffix: str, route: Route, bound_to: set[str]) -> str:
        self.routes[index] = route
        shard = route.shard
        if shard not in bound_to:
            bound_to.add(shard)
            if (prefix, shard) not in self._first_bound:
                self.prefixes_bound[shard] += 1
        self._buffers[shard].setdefault(prefix, []).append((index, suffix))
        self._buffered[shard] += 1
        self.in_flight[shard] += 1
        return shard

    def _take(self, shard: str) -> Bound:
        groups, self._buffers[shard] = self._buffers[shard], {}
        self._buffered[shard] = 0
        return shard, groups

    def completed(self, indices: Sequence[int]) -> None:
        self.answered = self.answered or bool(indices)
        routes, cost, rows = self.routes, dict.fromkeys(self.shards, 0.0), dict.fromkeys(self.shards, 0)
        for i in indices:
            shard, c, _ = routes.pop(i)
            cost[shard] += c
            rows[shard] += 1
        for shard, n in rows.items():
            if n:
                self.router.release(shard, cost[shard])
                self.in_flight[shard] -= n
