"""Prefix router: prompt-prefix token blocks -> shard. Pure: no Dask, no vLLM.

Each prefix is cut into blocks of ``block_size`` tokens and hashed as a chain
(block i's hash covers blocks 0..i), the way vLLM's prefix cache keys its KV
blocks. The router remembers, per block hash, which shards were sent that
block, so it knows which shard already holds how much of a new prefix.

A request whose prefix some shard already holds (at least ``min_match`` of its
full blocks) goes to the least-loaded shard among those holding the longest
match, so a document's later questions follow its first one. Any other request
goes to the shard with the lowest ``outstanding + work it adds there``, where the
work is the prefix tokens that shard lacks, the suffix and the decode (an unseen
document lands on the least-loaded shard, and a shared system prompt counts
where it is held). Imbalance guard: when the owner's outstanding work exceeds the
least-loaded shard's by more than ``imbalance_abs`` tokens *and* by a factor of
``imbalance_ratio``, the request is placed by cost instead, so one hot document
cannot swamp its owner.

Memory is bounded: at most ``max_blocks`` block hashes are remembered (LRU),
one dict entry each (about 210 bytes with its key and value, measured by
`python -m pipeline router-bench`).
"""
from __future__ import annotations

from array import array
from collections import OrderedDict
from typing import NamedTuple, Sequence

_MASK = (1 << 64) - 1


def block_hashes(tokens: Sequence[int], block_size: int) -> list[int]:
    """Chained hashes of the full blocks of ``tokens`` (a partial last block is not hashed)."""
    out: list[int] = []
    h = 0
    for end in range(block_size, len(tokens) + 1, block_size):
        h = hash((h, tuple(tokens[end - block_size:end]))) & _MASK
        out.append(h)
    return out


def text_block_hashes(text: str, block_chars: int) -> array:
    """Chained hashes of the full ``block_chars``-character blocks of ``text`` (the character
    counterpart of ``block_hashes``: no tokenizer needed)."""
    out = array("Q")
    h = 0
    for end in range(block_chars, len(text) + 1, block_chars):
        h = hash((h, text[end - block_chars:end])) & _MASK
        out.append(h)
    return out


class Prefix(NamedTuple):
    """What routing needs of a prefix, computed once per distinct prefix: its length in tokens
    and its chained block hashes (the token ids themselves are not kept)."""
    length: int
    hashes: list[int]

    @classmethod
    def of(cls, tokens: Sequence[int], block_size: int) -> "Prefix":
        # 8 bytes a hash (a list of Python ints would take 40)
        return cls(len(tokens), array("Q", block_hashes(tokens, block_size)))

    @classmethod
    def of_text(cls, text: str, block_size: int, chars_per_token: float) -> "Prefix":
        """Estimated from the characters: a block is ``block_size`` tokens' worth of characters
        (at the measured ``chars_per_token``), the length ``len(text) / chars_per_token``."""
        return cls(round(len(text) / chars_per_token),
                   text_block_hashes(text, max(1, round(block_size * chars_per_token))))


class Route(NamedTuple):
    shard: str
    cost: float          # estimated work charged to the shard (prefill tokens + decode)
    cached_tokens: int   # prefix tokens the shard is expected to hold already


class PrefixRouter:
    def __init__(self, shards: Sequence[str], block_size: int = 16, max_blocks: int = 1_000_000,
                 decode_weight: float = 1.0, min_match: float = 0.5,
                 imbalance_abs: float = 4096, imbalance_ratio: float = 1.5):
        if not shards:
            raise ValueError("router needs at least one shard")
        if len(set(shards)) != len(shards):
            raise ValueError("shard names must be unique")
        self.shards = list(shards)
        self.block_size = block_size
        self.max_blocks = max_blocks
        self.decode_weight = decode_weight
        self.min_match = min_match
        self.imbalance_abs = imbalance_abs
        self.imbalance_ratio = imbalance_ratio
        self._bit = {s: 1 << i for i, s in enumerate(self.shards)}
        self._blocks: OrderedDict[int, int] = OrderedDict()  # block hash -> bitmask of shards
        self.outstanding: dict[str, float] = {s: 0.0 for s in self.shards}
        self.blocks_held: dict[str, int] = {s: 0 for s in self.shards}  # the router's view, per shard
        self.down: set[str] = set()  # shards taken out of routing (their worker is gone)

    @property
    def live_shards(self) -> list[str]:
        return [s for s in self.shards if s not in self.down]

    def set_down(self, shard: str, down: bool = True) -> None:
        """Take ``shard`` out of routing (its worker is gone), or put it back."""
        if down:
            if len(self.down | {shard}) == len(self.shards):
                raise RuntimeError(f"cannot take shard {shard} out of routing: no other shard is left")
            self.down.add(shard)
            self.forget_shard(shard)
        else:
            self.down.discard(shard)

    def _held_by_shard(self, hashes: list[int]) -> dict[str, int]:
        """Blocks of the longest prefix each shard holds (0 for none); O(blocks + shards)."""
        held: dict[str, int] = {}
        alive = (1 << len(self.shards)) - 1
        blocks = self._blocks
        for i, h in enumerate(hashes):
            mask = blocks.get(h, 0) & alive
            dropped = alive & ~mask
            while dropped:  # shards whose match ends before block i
                low = dropped & -dropped
                held[self.shards[low.bit_length() - 1]] = i
                dropped ^= low
            alive = mask
            if not alive:
                break
        else:
            while alive:
                low = alive & -alive
                held[self.shards[low.bit_length() - 1]] = len(hashes)
                alive ^= low
        return {s: held.get(s, 0) for s in self.shards}

    def _imbalanced(self, shard: str, live: Sequence[str]) -> bool:
        outstanding = self.outstanding
        low = min(outstanding[s] for s in live)
        load = outstanding[shard]
        return load - low > self.imbalance_abs and load > self.imbalance_ratio * low

    def route(self, prefix_tokens: Sequence[int] | Prefix, suffix_len: int = 0, decode_tokens: int = 0,
              hashes: list[int] | None = None) -> Route:
        """Pick the shard for one request. ``prefix_tokens``: the prefix's tokens, or its
        ``Prefix`` (computed once for all its requests); ``hashes``: its ``block_hashes``."""
        if isinstance(prefix_tokens, Prefix):
            n, hashes = prefix_tokens
        else:
            n = len(prefix_tokens)
            if hashes is None:
                hashes = block_hashes(prefix_tokens, self.block_size)
        return self.route_rows(Prefix(n, hashes), [suffix_len], decode_tokens)[0]

    def route_rows(self, prefix: Prefix, suffix_lens: Sequence[int], decode_tokens: int = 0) -> list[Route]:
        """Route several requests on one prefix, in order: the same choices as routing each with
        ``route`` in turn, with the prefix's blocks looked up and remembered once per shard."""
        n, hashes = prefix
        held = self._held_by_shard(hashes)
        live = self.live_shards if self.down else self.shards
        outstanding, block = self.outstanding, self.block_size
        full = len(hashes)
        follows = bool(hashes)   # a prefix shorter than a block is placed by cost alone
        needed = self.min_match * full
        decode = self.decode_weight * decode_tokens
        remembered: set[str] = set()
        out = []
        for suffix_len in suffix_lens:
            extra = suffix_len + decode
            shard = None
            if follows:
                longest = max(held[s] for s in live)
                if longest >= needed:
                    owner = min((s for s in live if held[s] == longest), key=outstanding.__getitem__)
                    if not self._imbalanced(owner, live):
                        shard = owner
            if shard is None:
                shard = min(live, key=lambda s: outstanding[s] + n - held[s] * block)
            cost = n - held[shard] * block + extra
            cached = held[shard] * block
            if shard not in remembered:
                self._remember(hashes, shard)
                remembered.add(shard)
                held[shard] = full   # it holds the whole prefix now
            outstanding[shard] += cost
            out.append(Route(shard, cost, cached))
        return out

    def done(self, route: Route) -> None:
        """The routed request finished: its work is no longer outstanding."""
        self.release(route.shard, route.cost)

    def release(self, shard: str, cost: float) -> None:
        """Requests on ``shard`` that were charged ``cost`` in all finished."""
        self.outstanding[shard] = max(0.0, self.outstanding[shard] - cost)

    def seed(self, shard: str, prefix: Sequence[int] | Prefix) -> None:
        """Know that ``shard`` holds this prefix (tokens or ``Prefix``) already (its worker says
        its engine served it in an earlier job; pipeline/prefix_memory.py); no work is added."""
        hashes = prefix.hashes if isinstance(prefix, Prefix) else block_hashes(prefix, self.block_size)
        self._remember(list(hashes), shard)

    def forget_shard(self, shard: str) -> None:
        """Drop what ``shard`` was known to hold (it lost its cache, e.g. restarted)."""
        bit = self._bit[shard]
        for h in list(self._blocks):
            mask = self._blocks[h] & ~bit
            if mask == self._blocks[h]:
                continue
            if mask:
                self._blocks[h] = mask
            else:
                del self._blocks[h]
        self.outstanding[shard] = 0.0
        self.blocks_held[shard] = 0

    def _remember(self, hashes: list[int], shard: str) -> None:
        """``shard`` holds these blocks now: each becomes the most recently used, the prefix's
        first block last, so the LRU drops a prefix's tail before its head (as vLLM frees a
        request's blocks in reverse order): what the router remembers of a prefix stays a prefix."""
        bit = self._bit[shard]
        blocks = self._blocks
        get, move = blocks.get, blocks.move_to_end
        new = 0
        for h in reversed(hashes):
            old = get(h)
            if old is None:          # a new key goes to the end by itself
                blocks[h] = bit
                new += 1
            else:
                if not old & bit:
                    blocks[h] = old | bit
                    new += 1
                move(h)
        self.blocks_held[shard] += new
        while len(blocks) > self.max_blocks:
            _, mask = blocks.popitem(last=False)
            while mask:
                low = mask & -mask
                self.blocks_held[self.shards[low.bit_length() - 1]] -= 1
                mask ^= low

    def __len__(self) -> int:
        return len(self._blocks)
