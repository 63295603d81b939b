"""What one engine's prefix cache holds, as the router sees it: the router's block hashes of
the prefixes the engine has served, most recent last. Pure: no Dask, no vLLM.

Why on the worker: a router lives in one client process and one job; the engine (and its
prefix cache) lives on. Each worker remembers the prefixes its engine served, and a new
client seeds its router from every worker when it starts (``Pipeline.start``), so a second
job on the same documents -- from another process, in any row order -- goes to the shards
that hold them. The knowledge dies with the engine: a restarted worker starts empty, as its
engine's cache does.

Bounded by what the cache can hold: at most ``max_blocks`` hashes (the engine's KV-cache
blocks, in router blocks), least recently served prefixes dropped first, as the engine
evicts them. A prefix is hashed once, when first seen (its text's hash is the key).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

from pipeline.router import block_hashes


class PrefixMemory:
    def __init__(self, block_size: int, max_blocks: int):
        if block_size < 1 or max_blocks < 1:
            raise ValueError("block_size and max_blocks must be positive")
        self.block_size = block_size
        self.max_blocks = max_blocks
        self._prefixes: OrderedDict[int, list[int]] = OrderedDict()  # hash(prefix text) -> block hashes
        self.blocks = 0

    def served(self, prefix: str, tokens: Sequence[int]) -> None:
        """The engine was given ``prefix`` (tokenized as ``tokens``)."""
        key = hash(prefix)
        if key in self._prefixes:
            self._prefixes.move_to_end(key)
            return
        hashes = block_hashes(tokens, self.block_size)
        if not hashes:
            return
        self._prefixes[key] = hashes
        self.blocks += len(hashes)
        while self.blocks > self.max_blocks and len(self._prefixes) > 1:
            _, dropped = self._prefixes.popitem(last=False)
            self.blocks -= len(dropped)

    def held(self) -> list[list[int]]:
        """Each remembered prefix's block hashes, least recently served first."""
        return list(self._prefixes.values())

    def clear(self) -> None:
        self._prefixes.clear()
        self.blocks = 0

    def __len__(self) -> int:
        return len(self._prefixes)
