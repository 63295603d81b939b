"""Micro-benchmark of the prefix router alone: routing cost per request and memory at scale.

    python -m pipeline router-bench --shards 64 --documents 100000
"""
from __future__ import annotations

import random
import sys
import time

from pipeline.client.router import PrefixRouter


def run(shards: int = 64, documents: int = 100_000, questions_per_doc: int = 4, doc_tokens: int = 256,
        system_tokens: int = 32, block_size: int = 16, max_blocks: int = 1_000_000, seed: int = 0) -> dict:
    rng = random.Random(seed)
    system = [rng.randrange(49_152) for _ in range(system_tokens)]
    # Documents are generated on demand from their number (cheap and distinct), so the
    # benchmark's own memory stays small; only the router's state is measured.
    def doc(d: int) -> list[int]:
        head = [d // 49_152, d % 49_152]  # makes every document distinct from its first block on
        return system + head + [(d * 7_919 + j * 40_503) % 49_152 for j in range(doc_tokens - 2)]

    order = [d for d in range(documents) for _ in range(questions_per_doc)]
    rng.shuffle(order)
    # Timed pass: no tracing (tracemalloc slows every allocation several-fold).
    router = PrefixRouter([f"s{i}" for i in range(shards)], block_size=block_size, max_blocks=max_blocks)
    route_s = 0.0
    for d in order:
        tokens = doc(d)
        t0 = time.perf_counter()
        route = router.route(tokens, suffix_len=12, decode_tokens=32)
        route_s += time.perf_counter() - t0
        router.done(route)
    # Memory: the block table (the only structure that grows): the dict and its keys and values.
    blocks = router._blocks
    mem = sys.getsizeof(blocks) + sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in blocks.items())
    return {"shards": shards, "documents": documents, "requests": len(order),
            "prefix_tokens": system_tokens + doc_tokens, "block_size": block_size,
            "us_per_request": route_s / len(order) * 1e6, "requests_per_s": len(order) / route_s,
            "blocks_remembered": len(router), "max_blocks": max_blocks,
            "router_memory_mib": mem / 2**20, "bytes_per_block": mem / max(1, len(router))}

