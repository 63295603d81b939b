"""Which shard answers each document of a job, and in which bucket: a counting pass over the
whole job's documents, then a bounded-load packing. Pure (numpy, no Dask): it runs as one task
on a worker, over the per-document counts the partitions' read tasks made
(pipeline/jobs/prompt_table.py), so the client holds no per-document state.

- Every row of a document goes to one shard (placement is per document).
- A document a live shard's engine already holds from an earlier job stays there, unless that
  shard would then carry more than ``balance`` times its fair share of the job's cost.
- The rest are packed largest first onto the least loaded live shard (longest processing time
  first), so a skewed job (a few documents with many questions) stays balanced.
- Only live shards get work: a dead shard's documents go to the others.

A document's cost is its prefix once plus each row's suffix and expected answer, in characters.
Each shard's documents are then cut into buckets of at most ``bucket_rows`` rows (a document is
never split): a bucket is one answer task, its rows answered grouped by document.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
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
    digests: np.ndarray      # uint64, sorted: every document of the job
    bucket: np.ndarray       # int32: each document's bucket
    buckets: list[Bucket]
    first: np.ndarray | None = None   # int64: each document's first row in the job (its text travels with it)

    def bucket_of(self, digests: np.ndarray) -> np.ndarray:
        """The bucket of each of ``digests`` (each must be one of the job's documents)."""
        where = np.searchsorted(self.digests, digests)
        return self.bucket[where]

    def first_of(self, digests: np.ndarray) -> np.ndarray:
        """The first row's position of the document of each of ``digests``."""
        return self.first[np.searchsorted(self.digests, digests)]

    def shard_rows(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for b in self.buckets:
            out[b.shard] = out.get(b.shard, 0) + b.rows
        return out


def place_documents(digests: np.ndarray, rows: np.ndarray, cost: np.ndarray, shards: Sequence[str],
                    held: Mapping[int, str] | None = None, bucket_rows: int = 50_000,
                    balance: float = 1.25) -> Placement:
    """``digests``, ``rows``, ``cost``: one entry per distinct document (digests unique).
    ``shards``: the live shards. ``held``: digest -> the shard whose engine holds it."""
    if not shards:
        raise ValueError("no live shard to place documents on")
    digests = np.asarray(digests, dtype=np.uint64)
    order = np.argsort(digests, kind="stable")
    digests, rows, cost = digests[order], np.asarray(rows, np.int64)[order], np.asarray(cost, np.float64)[order]
    n, index = len(digests), {s: i for i, s in enumerate(shards)}
    shard_of = np.full(n, -1, dtype=np.int64)
    load = np.zeros(len(shards))
    cap = balance * cost.sum() / len(shards) if n else 0.0
    if held and n:   # (the held documents are few: what the engines' caches hold)
        held_digests = np.fromiter(held.keys(), np.uint64, len(held))
        held_shards = np.array([index.get(s, -1) for s in held.values()], np.int64)
        where = np.searchsorted(digests, held_digests)
        found = (where < n) & (held_shards >= 0)
        found[found] = digests[where[found]] == held_digests[found]
        for k, s in zip(where[found].tolist(), held_shards[found].tolist()):
            if load[s] + cost[k] <= cap:
                shard_of[k] = s
                load[s] += cost[k]
    free = np.flatnonzero(shard_of < 0)
    free = free[np.argsort(-cost[free], kind="stable")]
    heap = [(load[s], s) for s in range(len(shards))]
    heapq.heapify(heap)
    for k in free.tolist():
        l, s = heapq.heappop(heap)
        shard_of[k] = s
        heapq.heappush(heap, (l + cost[k], s))
    bucket = np.zeros(n, dtype=np.int32)
    buckets: list[Bucket] = []
    for s, name in enumerate(shards):
        mine = np.flatnonzero(shard_of == s)
        if not len(mine):
            continue
        # consecutive documents (in digest order) while the bucket has room
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
            buckets.append(Bucket(b, name, int(rows[mine[lo:hi]].sum()), hi - lo))
    return Placement(digests, bucket, buckets)
