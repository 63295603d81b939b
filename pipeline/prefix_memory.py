"""What one engine's prefix cache holds, as a client can use it: the prefixes (document
texts, as stable 64-bit digests) the engine has served, most recent last. Pure: no Dask, no
vLLM.

Why on the worker: a router lives in one client process and one job; the engine (and its
prefix cache) lives on. Each worker remembers the prefixes its engine served; a new client
asks every worker when it starts (``Pipeline.start``), and when one of its rows carries a
known prefix, its router learns that the shard holds that prefix's blocks before routing it
(``PrefixRouter.seed``). So a second job on the same documents -- from another process, in
any row order -- goes to the shards that hold them. The knowledge dies with the engine: a
restarted worker starts empty, as its engine's cache does. Digests of the text, not token
hashes: the same on both sides whatever tokenizer or block size each uses.

Bounded by what the cache can hold: prefixes are dropped, least recently served first, once
their tokens exceed the engine's KV cache (``max_tokens``), as the engine evicts them.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash


def prefix_digest(text: str) -> int:
    """A stable 64-bit digest of a prefix (the same in every process): XXH3-64 of its UTF-8."""
    return xxhash.xxh3_64_intdigest(text.encode("utf-8", "surrogatepass"))


def text_digests(texts, head: str = "", tail: str = "") -> np.ndarray:
    """``prefix_digest(head + value + tail)`` of each value of an Arrow string or large_string
    array, digested from the array's own bytes (valid UTF-8: what ``str.encode`` gives), with no
    Python string made. (A null value gets the digest of whatever bytes its slot spans.)
    XXH3, not a cryptographic hash: every row of a job is digested, and blake2b took ~8x as long
    (1.6 s of the ~17 s of CPU sampled in the workers through a 1M-row null job); 64 bits either way."""
    if not len(texts):
        return np.zeros(0, np.uint64)
    data = texts.buffers()[2]
    bounds = value_bounds(texts).tolist()
    view = memoryview(data if data is not None else b"")
    values = map(view.__getitem__, map(slice, bounds, bounds[1:]))
    if head or tail:
        base, end = xxhash.xxh3_64(head.encode("utf-8", "surrogatepass")), tail.encode("utf-8", "surrogatepass")

        def digest(value) -> int:
            h = base.copy()
            h.update(value)
            h.update(end)
            return h.intdigest()

        return np.fromiter(map(digest, values), np.uint64, len(texts))
    return np.fromiter(map(xxhash.xxh3_64_intdigest, values), np.uint64, len(texts))


def value_bounds(texts: pa.Array) -> np.ndarray:
    """Where each value of a string or large_string array starts, and where the last ends
    (``len(texts) + 1`` byte offsets into its data; its slice offset applied)."""
    kind = np.int64 if pa.types.is_large_string(texts.type) else np.int32
    return np.frombuffer(texts.buffers()[1], kind)[texts.offset : texts.offset + len(texts) + 1]


def digest_codes(texts: pa.Array, head: str = "", tail: str = "") -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Each row of ``texts`` (string or large_string) coded by its distinct value: the codes
    (int32, in order of first appearance; null for a null row), each code's digest of
    ``head + value + tail``, and each code's first row. Values are told apart by that digest
    (the 64-bit digest that names a prefix everywhere else): each row is digested once, and no
    text is hashed or compared again -- Arrow's ``dictionary_encode`` of document-sized strings
    took ~3x as long, and copied each distinct one."""
    digests = text_digests(texts, head, tail)
    valid = np.ones(len(texts), bool) if texts.null_count == 0 else texts.is_valid().to_numpy(zero_copy_only=False)
    encoded = pc.dictionary_encode(pa.array(digests, pa.uint64(), mask=~valid))
    _, first = np.unique(pc.drop_null(encoded.indices).to_numpy(), return_index=True)
    return encoded.indices, encoded.dictionary.to_numpy(), np.flatnonzero(valid)[first]


class PrefixMemory:
    def __init__(self, max_tokens: int):
        if max_tokens < 1:
            raise ValueError("max_tokens must be positive")
        self.max_tokens = max_tokens
        self._prefixes: OrderedDict[int, int] = OrderedDict()  # digest -> its tokens
        self.tokens = 0

    def served_digest(self, key: int, tokens: int) -> None:
        """The engine was given the prefix whose ``prefix_digest`` is ``key`` (``tokens`` long)."""
        if key in self._prefixes:
            self._prefixes.move_to_end(key)
            return
        self._prefixes[key] = tokens
        self.tokens += tokens
        while self.tokens > self.max_tokens and len(self._prefixes) > 1:
            _, dropped = self._prefixes.popitem(last=False)
            self.tokens -= dropped

    def held(self) -> list[int]:
        """The remembered prefixes' digests, least recently served first."""
        return list(self._prefixes)

    def clear(self) -> None:
        self._prefixes.clear()
        self.tokens = 0

    def __len__(self) -> int:
        return len(self._prefixes)
