"""Which shard answers each document of a job, and in which bucket: a counting pass over the
whole job's documents, then a bounded-load packing. Pure (numpy, no Dask): it runs as one task
on a worker, over the per-document counts the partitions' read tasks made
(pipeline/jobs/prompt_table.py), so the client holds no per-document state.

- Every row of a document goes to one shard (placement is per document), except a document
  with more rows than a bucket, or than a shard's fair share of a large job: it is split into
  chunks (a row's chunk: its position modulo their number), each placed on its own and
  prefilled once where it lands (a ``generate`` job's rows all share one prompt head).
- A document a live shard's engine already holds from an earlier job stays there, unless that
  shard would then carry more than ``balance`` times its fair share of the job's cost.
- The rest are packed largest first onto the least loaded live shard (longest processing time
  first), so a skewed job (a few documents with many questions) stays balanced.
- Only live shards get work: a dead shard's documents go to the others.

A document's cost is its prefix once plus each row's suffix and expected answer, in UTF-8 bytes
(a character each, for ASCII text; the text's byte lengths cost nothing to read).
Each shard's documents are then cut into buckets of at most ``bucket_rows`` rows (a document, or
chunk, is never cut there): a bucket is one answer task, its rows answered grouped by document.
"""
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
    digests: np.ndarray      # uint64, sorted: every document of the job
    bucket: np.ndarray       # int32: each document's bucket (a split document's first chunk's)
    buckets: list[Bucket]
    first: np.ndarray | None = None   # int64: each document's first row in the job (its text travels with it)
    split: dict[int, np.ndarray] = field(default_factory=dict)   # digest -> its chunks' buckets (few documents)

    def bucket_of(self, digests: np.ndarray, positions: np.ndarray | None = None) -> np.ndarray:
        """The bucket of each row, given its document's digest (each must be one of the job's
        documents) and, where a document is split, its position (chunk ``position % chunks``)."""
        out = self.bucket[np.searchsorted(self.digests, digests)]
        for digest, chunk_buckets in self.split.items():
            mine = digests == np.uint64(digest)
            if mine.any():
                if positions is None:
                    raise ValueError("a split document's rows need their positions")
                out[mine] = chunk_buckets[positions[mine] % len(chunk_buckets)]
        return out

    def first_of(self, digests: np.ndarray) -> np.ndarray:
        """The first row's position of the document of each of ``digests``."""
        return self.first[np.searchsorted(self.digests, digests)]

    def shard_rows(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for b in self.buckets:
            out[b.shard] = out.get(b.shard, 0) + b.rows
        return out


# A document is split across shards only above this many rows (or a bucket's): below it, keeping
# its questions on the shard that prefilled it is worth more than the balance a split would buy.
SPLIT_ROWS = 1024


def place_documents(digests: np.ndarray, rows: np.ndarray, cost: np.ndarray, shards: Sequence[str],
                    held: Mapping[int, str] | None = None, bucket_rows: int = 50_000,
                    balance: float = 1.25, prefix_cost: np.ndarray | None = None) -> Placement:
    """``digests``, ``rows``, ``cost``: one entry per distinct document (digests unique).
    ``shards``: the live shards. ``held``: digest -> the shard whose engine holds it.
    A document with more rows than a bucket, or than both a shard's fair share and ``SPLIT_ROWS``
    (a prompt head every row of a job shares), is split into chunks of rows that are placed on their own; each
    costs its share of the document's cost plus, once more, ``prefix_cost`` (its prefill)."""
    if not shards:
        raise ValueError("no live shard to place documents on")
    digests = np.asarray(digests, dtype=np.uint64)
    order = np.argsort(digests, kind="stable")
    digests, rows, cost = digests[order], np.asarray(rows, np.int64)[order], np.asarray(cost, np.float64)[order]
    prefix_cost = np.zeros(len(digests)) if prefix_cost is None else np.asarray(prefix_cost, np.float64)[order]
    # the units placed: a document, or a chunk of a split one
    fair_rows = -(-int(rows.sum()) // len(shards))
    cap_rows = max(1, min(bucket_rows, max(fair_rows, SPLIT_ROWS)))
    chunks = np.maximum(1, -(-rows // cap_rows))
    unit_doc = np.repeat(np.arange(len(digests)), chunks)
    unit_chunk = np.arange(len(unit_doc)) - np.repeat(np.cumsum(chunks) - chunks, chunks)
    unit_rows = rows[unit_doc] // chunks[unit_doc] + (unit_chunk < rows[unit_doc] % chunks[unit_doc])
    unit_cost = np.where(chunks[unit_doc] > 1, (cost[unit_doc] - prefix_cost[unit_doc]) / chunks[unit_doc] +
                         prefix_cost[unit_doc], cost[unit_doc])
    unit_bucket, buckets = _pack(digests[unit_doc], unit_rows, unit_cost, shards, held, bucket_rows, balance)
    first_unit = np.cumsum(chunks) - chunks
    split = {int(digests[d]): unit_bucket[first_unit[d]:first_unit[d] + chunks[d]].copy()
             for d in np.flatnonzero(chunks > 1).tolist()}
    return Placement(digests, unit_bucket[first_unit], buckets, split=split)


def _pack(digests: np.ndarray, rows: np.ndarray, cost: np.ndarray, shards: Sequence[str],
          held: Mapping[int, str] | None, bucket_rows: int, balance: float) -> tuple[np.ndarray, list[Bucket]]:
    """Each unit's bucket (units in digest order, a split document's chunks together), and the
    buckets: held units stay on their shard within ``balance`` × the fair share, the rest
    largest first onto the least loaded shard, then each shard's units cut into buckets."""
    n, index = len(digests), {s: i for i, s in enumerate(shards)}
    shard_of = np.full(n, -1, dtype=np.int64)
    load = np.zeros(len(shards))
    cap = balance * cost.sum() / len(shards) if n else 0.0
    if held and n:   # (the held documents are few: what the engines' caches hold)
        held_shard = {d: index[s] for d, s in held.items() if s in index}
        for k in np.flatnonzero(np.isin(digests, np.fromiter(held_shard, np.uint64, len(held_shard)))).tolist():
            s = held_shard[int(digests[k])]
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
        # consecutive units (in digest order) while the bucket has room
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
