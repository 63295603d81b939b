"""Decides which shard answers each document of a job, and in which bucket.

It runs as one task on a worker, so the client holds no per-document state. A document's rows go to one shard, so
it is prefilled once; only a document larger than a bucket or a shard's fair share is split. A document an engine
already holds stays there within ``balance`` times the fair share; the rest are packed largest first onto the least
loaded live shard. Where a job names more LoRA adapters than an engine applies at once, adapters are spread first.

A document costs its prefix once plus each row's suffix and expected answer, in UTF-8 bytes."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class Bucket:
    index: int
    shard: str
    rows: int
    documents: int


@dataclass
class Placement:
    digests: np.ndarray  # uint64, sorted: every document of the job
    bucket: np.ndarray  # int32: each document's bucket, a split one's first chunk's
    buckets: list[Bucket]
    first: np.ndarray | None = None  # int64: each document's first row in the job
    split: dict[int, np.ndarray] = field(default_factory=dict)  # digest -> its chunks' buckets

    def bucket_of(self, digests: np.ndarray, positions: np.ndarray | None = None) -> np.ndarray:
        """A split document's rows need their positions: ``position % chunks`` picks the chunk."""
        out = self.bucket[np.searchsorted(self.digests, digests)]
        for digest, chunk_buckets in self.split.items():
            mine = digests == np.uint64(digest)
            if mine.any():
                if positions is None:
                    raise ValueError("a split document's rows need their positions")
                out[mine] = chunk_buckets[positions[mine] % len(chunk_buckets)]
        return out

    def first_of(self, digests: np.ndarray) -> np.ndarray:
        if self.first is None:
            raise ValueError("the placement has no documents' first rows yet (set first: place_task)")
        return self.first[np.searchsorted(self.digests, digests)]


# Below this many rows, keeping a document's questions on the shard that prefilled it is worth more than the balance
# a split would buy.
SPLIT_ROWS = 1024


def place_documents(
    digests: np.ndarray,
    rows: np.ndarray,
    cost: np.ndarray,
    shards: Sequence[str],
    held: Mapping[int, str] | None = None,
    bucket_rows: int = 50_000,
    balance: float = 1.25,
    prefix_cost: np.ndarray | None = None,
    adapters: np.ndarray | None = None,
    max_loras: int = 0,
) -> Placement:
    """Takes one entry per distinct document. Each chunk of a split document costs its share plus ``prefix_cost``
    once more, since each chunk is prefilled where it lands. ``adapters`` holds each document's adapter code, 0 for
    the base model."""
    if not shards:
        raise ValueError("no live shard to place documents on")
    digests = np.asarray(digests, dtype=np.uint64)
    order = np.argsort(digests, kind="stable")
    digests, rows, cost = digests[order], np.asarray(rows, np.int64)[order], np.asarray(cost, np.float64)[order]
    prefix_cost = np.zeros(len(digests)) if prefix_cost is None else np.asarray(prefix_cost, np.float64)[order]
    adapters = None if adapters is None else np.asarray(adapters, np.uint64)[order]
    # A unit is a document or a chunk of a split one.
    fair_rows = -(-int(rows.sum()) // len(shards))
    cap_rows = max(1, min(bucket_rows, max(fair_rows, SPLIT_ROWS)))
    chunks = np.maximum(1, -(-rows // cap_rows))
    unit_doc = np.repeat(np.arange(len(digests)), chunks)
    unit_chunk = np.arange(len(unit_doc)) - np.repeat(np.cumsum(chunks) - chunks, chunks)
    unit_rows = rows[unit_doc] // chunks[unit_doc] + (unit_chunk < rows[unit_doc] % chunks[unit_doc])
    unit_cost = np.where(
        chunks[unit_doc] > 1,
        (cost[unit_doc] - prefix_cost[unit_doc]) / chunks[unit_doc] + prefix_cost[unit_doc],
        cost[unit_doc],
    )
    unit_bucket, buckets = _pack(
        digests[unit_doc],
        unit_rows,
        unit_cost,
        shards,
        held,
        bucket_rows,
        balance,
        None if adapters is None else adapters[unit_doc],
        max_loras,
    )
    first_unit = np.cumsum(chunks) - chunks
    split = {
        int(digests[d]): unit_bucket[first_unit[d] : first_unit[d] + chunks[d]].copy()
        for d in np.flatnonzero(chunks > 1).tolist()
    }
    return Placement(digests, unit_bucket[first_unit], buckets, split=split)


def _pack(
    digests: np.ndarray,
    rows: np.ndarray,
    cost: np.ndarray,
    shards: Sequence[str],
    held: Mapping[int, str] | None,
    bucket_rows: int,
    balance: float,
    adapter: np.ndarray | None = None,
    max_loras: int = 0,
) -> tuple[np.ndarray, list[Bucket]]:
    """Chooses each unit's shard, then cuts each shard's units into buckets."""
    index = {s: i for i, s in enumerate(shards)}
    held_shard = {d: index[s] for d, s in held.items() if s in index} if held and len(digests) else {}
    if adapter is not None and max_loras > 0 and len(shards) > 1 and np.count_nonzero(np.unique(adapter)) > max_loras:
        shard_of = adapter_shards(digests, cost, adapter, len(shards), held_shard, max_loras, balance)
    else:
        shard_of = _least_loaded(digests, cost, len(shards), held_shard, balance)
    return _cut(digests, rows, shard_of, shards, bucket_rows, adapter)


def _least_loaded(
    digests: np.ndarray,
    cost: np.ndarray,
    n_shards: int,
    held_shard: dict[int, int],
    balance: float,
    shard_of: np.ndarray | None = None,
    load: np.ndarray | None = None,
) -> np.ndarray:
    """Keeps held units on their shard within ``balance`` times the fair share and packs the rest largest first onto
    the least loaded shard. ``shard_of`` and ``load`` carry units already placed, -1 meaning not yet."""
    n = len(digests)
    shard_of = np.full(n, -1, dtype=np.int64) if shard_of is None else shard_of
    load = np.zeros(n_shards) if load is None else load
    cap = balance * cost.sum() / n_shards if n else 0.0
    if held_shard:  # few: what the engines' caches hold
        held_keys = np.fromiter(held_shard, np.uint64, len(held_shard))
        for k in np.flatnonzero(np.isin(digests, held_keys) & (shard_of < 0)).tolist():
            s = held_shard[int(digests[k])]
            if load[s] + cost[k] <= cap:
                shard_of[k] = s
                load[s] += cost[k]
    free = np.flatnonzero(shard_of < 0)
    free = free[np.argsort(-cost[free], kind="stable")]
    heap = [(load[s], s) for s in range(n_shards)]
    heapq.heapify(heap)
    for k in free.tolist():
        shard_load, s = heapq.heappop(heap)
        shard_of[k] = s
        heapq.heappush(heap, (shard_load + cost[k], s))
    return shard_of


def _cut(
    digests: np.ndarray,
    rows: np.ndarray,
    shard_of: np.ndarray,
    shards: Sequence[str],
    bucket_rows: int,
    adapter: np.ndarray | None,
) -> tuple[np.ndarray, list[Bucket]]:
    """Cuts each shard's units into buckets of at most ``bucket_rows`` rows, never inside a unit, each adapter's
    units together."""
    bucket = np.zeros(len(digests), dtype=np.int32)
    buckets: list[Bucket] = []
    for s, name in enumerate(shards):
        mine = np.flatnonzero(shard_of == s)
        if not len(mine):
            continue
        if adapter is not None:
            mine = mine[np.argsort(adapter[mine], kind="stable")]
        ends = np.cumsum(rows[mine])
        cuts = [0]
        start_rows = 0
        for j in range(len(mine)):
            if ends[j] - start_rows > bucket_rows and j > cuts[-1]:
                cuts.append(j)
                start_rows = ends[j - 1]
        cuts.append(len(mine))
        for lo, hi in zip(cuts, cuts[1:]):
            b = len(buckets)
            bucket[mine[lo:hi]] = b
            buckets.append(Bucket(b, name, int(rows[mine[lo:hi]].sum()), len(np.unique(digests[mine[lo:hi]]))))
    return bucket, buckets


def adapter_shards(
    digests: np.ndarray,
    cost: np.ndarray,
    adapter: np.ndarray,
    n_shards: int,
    held_shard: dict[int, int],
    max_loras: int,
    balance: float,
) -> np.ndarray:
    """Places units where the job's adapters outnumber an engine's LoRA slots. Each shard serves at most
    ``max_loras`` adapters, or ``ceil(adapters / n_shards)`` where there are more. An adapter's units go largest
    first to its shard furthest below its quota; the base model's units take no slot and level the loads last."""
    names, group = np.unique(adapter, return_inverse=True)
    lora = np.flatnonzero(names != 0)
    fair = cost.sum() / n_shards
    slots = max_loras if len(lora) <= n_shards * max_loras else -(-len(lora) // n_shards)
    held_load = np.zeros((len(names), n_shards))
    held_units = np.flatnonzero(np.isin(digests, np.fromiter(held_shard, np.uint64, len(held_shard))))
    for k in held_units.tolist():
        held_load[group[k], held_shard[int(digests[k])]] += cost[k]
    share = spread(
        np.bincount(group, weights=cost, minlength=len(names))[lora], n_shards, slots, fair, held_load[lora], balance
    )
    shard_of = np.full(len(digests), -1, dtype=np.int64)
    load = np.zeros(n_shards)
    for g, quota in zip(lora.tolist(), share):
        mine = np.flatnonzero(group == g)
        mine = mine[np.argsort(-cost[mine], kind="stable")]
        given = dict.fromkeys(quota, 0.0)
        for k in mine.tolist():
            s = held_shard.get(int(digests[k]), -1)
            if s not in given or load[s] + cost[k] > balance * fair:
                s = max(given, key=lambda t: (quota[t] - given[t], -t))
            shard_of[k] = s
            given[s] += cost[k]
            load[s] += cost[k]
    return _least_loaded(digests, cost, n_shards, held_shard, balance, shard_of, load)


def spread(
    costs: np.ndarray,
    n_shards: int,
    slots: int,
    fair: float,
    held_load: np.ndarray | None = None,
    balance: float = 1.25,
) -> list[dict[int, float]]:
    """Gives each adapter its shards and the cost each takes, at most ``slots`` adapters a shard. While slots are
    spare, the adapter with the largest piece is cut once more where that lowers the top load above ``fair``, which
    the base model's rows cannot level."""
    pieces = np.ones(len(costs), np.int64)
    best = _pack_pieces(costs, pieces, n_shards, slots, held_load, balance * fair)
    if best is None:
        raise ValueError(f"{len(costs)} adapters do not fit {n_shards} shards of {slots} slots")
    spare = n_shards * slots - len(costs)
    while spare > 0:
        size = np.where(pieces < n_shards, costs / pieces, -1.0)
        a = int(np.argmax(size))
        if size[a] <= 0:
            break
        more = pieces.copy()
        more[a] += 1
        trial = _pack_pieces(costs, more, n_shards, slots, held_load, balance * fair)
        if trial is None or max(_top(trial, n_shards), fair) >= max(_top(best, n_shards), fair) * (1 - 1e-9):
            break
        pieces, best, spare = more, trial, spare - 1
    return best


def _top(share: list[dict[int, float]], n_shards: int) -> float:
    load = np.zeros(n_shards)
    for quota in share:
        for s, c in quota.items():
            load[s] += c
    return float(load.max())


def _pack_pieces(
    costs: np.ndarray, pieces: np.ndarray, n_shards: int, slots: int, held_load: np.ndarray | None, cap: float
) -> list[dict[int, float]] | None:
    """Packs each adapter's equal pieces largest first onto the least loaded shard with a free slot that does not
    serve it yet, preferring shards that hold its documents while within ``cap``. None where the slots run out."""
    order = sorted(
        ((costs[a] / pieces[a], a) for a in range(len(costs)) for _ in range(pieces[a])), key=lambda p: (-p[0], p[1])
    )
    load, used = np.zeros(n_shards), np.zeros(n_shards, np.int64)
    share: list[dict[int, float]] = [{} for _ in costs]
    for size, a in order:
        free = [s for s in range(n_shards) if used[s] < slots and s not in share[a]]
        if not free:
            return None
        warm = [s for s in free if held_load is not None and held_load[a, s] > 0 and load[s] + size <= cap]
        s = min(warm or free, key=lambda t: (load[t], t))
        share[a][s] = size
        load[s] += size
        used[s] += 1
    return share
