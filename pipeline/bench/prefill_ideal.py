"""The least prefill a set of prompts needs: what a perfect prefix cache would compute.

A prefix cache never recomputes a token whose whole prefix (the token and everything
before it) was computed before on the same engine. So over a job, the least work is
one computation per distinct token prefix: the number of nodes of a trie holding
every prompt. Shared heads (the chat template's system turn, a document asked about
four times) count once, not once per prompt or once per document.

Sharded, each engine has its own cache: the head common to every prompt is computed
at least once on each shard that serves anything.

vLLM caches whole KV blocks only, so at block granularity a prompt reuses its full
blocks whose chained content was seen before and always computes the tokens of its
last, partial block.
"""

from __future__ import annotations

from typing import Sequence


def _common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def token_ideal(prompts: Sequence[Sequence[int]], shards: int = 1) -> int:
    """Distinct token prefixes over ``prompts`` (trie nodes), plus the head common to
    all prompts once more for every further shard that serves some of them."""
    if not prompts:
        return 0
    ordered = sorted(tuple(p) for p in prompts)
    nodes = len(ordered[0]) + sum(len(b) - _common_prefix_len(a, b) for a, b in zip(ordered, ordered[1:]))
    head = _common_prefix_len(ordered[0], ordered[-1])
    return nodes + (min(shards, len(ordered)) - 1) * head


def block_ideal(prompts: Sequence[Sequence[int]], block_size: int, shards: int = 1) -> int:
    """The same at the KV cache's block granularity: each distinct chain of full blocks
    once, every prompt's partial last block, and the full blocks of the common head once
    more per further shard."""
    if not prompts:
        return 0
    seen: set[int] = set()
    computed = 0
    for p in prompts:
        p = tuple(p)
        full = len(p) // block_size
        h = 0
        for b in range(full):
            h = hash((h, p[b * block_size : (b + 1) * block_size]))
            if h not in seen:
                seen.add(h)
                computed += block_size
        computed += len(p) - full * block_size
    ordered = sorted(tuple(p) for p in prompts)
    head_blocks = _common_prefix_len(ordered[0], ordered[-1]) // block_size
    return computed + (min(shards, len(prompts)) - 1) * head_blocks * block_size
