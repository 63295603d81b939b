"""What one engine's prefix cache holds, as digests of the document texts it has served.

The worker keeps this because its engine outlives any one client: a new client seeds its router
from every worker, so a later job on the same documents goes to the shards that hold them. Text
digests match on both sides whatever the tokenizer. Prefixes are dropped least recently served
first once their tokens exceed the KV cache, as the engine evicts them."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash


def prefix_digest(text: str) -> int:
    """A 64-bit digest of a prefix that is the same in every process."""
    return xxhash.xxh3_64_intdigest(text.encode("utf-8", "surrogatepass"))


def text_digests(texts, head: str = "", tail: str = "") -> np.ndarray:
    """``prefix_digest(head + value + tail)`` of each value of an Arrow string array, read from its
    bytes without making Python strings."""
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
    """The ``len(texts) + 1`` byte offsets of a string array's values in its data buffer."""
    kind = np.int64 if pa.types.is_large_string(texts.type) else np.int32
    return np.frombuffer(texts.buffers()[1], kind)[texts.offset : texts.offset + len(texts) + 1]


def digest_codes(texts: pa.Array, head: str = "", tail: str = "") -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Each row coded by its distinct value, told apart by digest, which is cheaper than encoding
    document-sized strings: the codes, each code's digest and each code's first row."""
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
        """Remember that the engine was given the prefix ``key``, ``tokens`` long."""
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
