"""The fake engine's model of vLLM's prefix caching, so grouping and routing can be measured on large jobs without a
real engine.

As in vLLM, full blocks are named by a hash chained over the blocks before them, a request is served its leading
cached blocks but never its last token, and the least recently used block is evicted first. A request's blocks are
touched from last to first, so a document's head stays longest, as vLLM frees a request's blocks tail first. Unlike
vLLM, requests in flight pin nothing."""

from __future__ import annotations

from array import array
from collections import OrderedDict


class PrefixCacheModel:
    def __init__(self, capacity_blocks: int, block_size: int):
        if capacity_blocks < 0 or block_size < 1:
            raise ValueError("capacity_blocks >= 0 and block_size >= 1")
        self.capacity_blocks = capacity_blocks
        self.block_size = block_size
        self._blocks: OrderedDict[int, None] = OrderedDict()  # block hash, least recently used first

    def serve(self, prompt_ids) -> int:
        """The prompt tokens the cache serves; the request's blocks then become the most recently used."""
        if not self.capacity_blocks:
            return 0
        data = (
            prompt_ids if isinstance(prompt_ids, array) and prompt_ids.typecode == "I" else array("I", prompt_ids)
        ).tobytes()
        step = 4 * self.block_size
        hashes, h = [], 0
        for start in range(0, len(prompt_ids) // self.block_size * step, step):
            h = hash((h, data[start : start + step]))
            hashes.append(h)
        hit = 0
        limit = (len(prompt_ids) - 1) // self.block_size  # blocks that leave a token to compute
        while hit < limit and hashes[hit] in self._blocks:
            hit += 1
        blocks = self._blocks
        for h in reversed(hashes):
            blocks[h] = None
            blocks.move_to_end(h)
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)
        return hit * self.block_size

    def reset(self) -> None:
        self._blocks.clear()
