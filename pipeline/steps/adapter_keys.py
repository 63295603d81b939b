"""Rows that name a LoRA adapter, as placement keys: a document answered under two adapters is
two documents (an engine's cached prefix under one adapter serves no other), each with a digest
of its own (the prefix's folded with the adapter's) and an adapter code placement packs by
(pipeline/steps/placement.py). Rows with no adapter keep their prefix's digest, byte for byte.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.prefix_memory import text_digests


def adapter_code(names: pa.Array) -> np.ndarray:
    """Each adapter name's code (uint64): its ``prefix_digest``, never 0 (0: the base model)."""
    codes = text_digests(names.cast(pa.large_string()))
    codes[codes == 0] = 1
    return codes


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, element-wise (uint64, wrapping)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def adapter_digests(
    prefix: pa.DictionaryArray, digests: np.ndarray, adapter: pa.Array
) -> tuple[pa.DictionaryArray, np.ndarray, np.ndarray | None]:
    """``prefix`` (each row's code; ``digests``: each code's) re-coded by (prefix, adapter): a
    document answered under two adapters is two documents (neither's cached prefix serves the
    other), and its digest under an adapter is the prefix's folded with ``adapter_code``.
    Returns the new prefix codes, their digests and adapter codes; rows with no adapter keep
    their prefix's digest (nothing changes where no row names one: adapter codes None)."""
    if adapter.null_count == len(adapter):
        return prefix, digests, None
    if pa.types.is_dictionary(adapter.type):
        adapter = adapter.cast(adapter.type.value_type)
    encoded = pc.dictionary_encode(adapter)
    names = np.concatenate(([np.uint64(0)], adapter_code(encoded.dictionary)))  # (0: no adapter)
    which = pc.fill_null(pc.add(encoded.indices.cast(pa.int64()), 1), 0).to_numpy(zero_copy_only=False)
    index = prefix.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    pairs, codes = np.unique(np.stack([index, which], axis=1), axis=0, return_inverse=True)
    code = names[pairs[:, 1]]
    folded = np.where(code == 0, digests[pairs[:, 0]], _mix(digests[pairs[:, 0]] ^ _mix(code)))
    dictionary = prefix.dictionary.take(pa.array(pairs[:, 0]))
    return pa.DictionaryArray.from_arrays(pa.array(codes.reshape(-1), pa.int32()), dictionary), folded, code
