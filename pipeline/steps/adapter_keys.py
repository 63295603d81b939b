"""Rows that name a LoRA adapter, as placement keys. A prefix cached under one adapter serves no other, so a
document answered under two adapters is two documents, each with its own digest. Rows with no adapter keep their
prefix's digest exactly."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.prefix_memory import text_digests


def adapter_code(names: pa.Array) -> np.ndarray:
    """Each adapter name's code, never 0, which stands for the base model."""
    codes = text_digests(names.cast(pa.large_string()))
    codes[codes == 0] = 1
    return codes


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, element-wise with wrapping."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def adapter_digests(
    prefix: pa.DictionaryArray, digests: np.ndarray, adapter: pa.Array
) -> tuple[pa.DictionaryArray, np.ndarray, np.ndarray | None]:
    """Re-codes ``prefix`` by (prefix, adapter), folding each adapter's code into the prefix's digest. Returns the
    new codes, their digests and their adapter codes, which are None where no row names an adapter."""
    if adapter.null_count == len(adapter):
        return prefix, digests, None
    if pa.types.is_dictionary(adapter.type):
        adapter = adapter.cast(adapter.type.value_type)
    encoded = pc.dictionary_encode(adapter)
    names = np.concatenate(([np.uint64(0)], adapter_code(encoded.dictionary)))  # 0: no adapter
    which = pc.fill_null(pc.add(encoded.indices.cast(pa.int64()), 1), 0).to_numpy(zero_copy_only=False)
    index = prefix.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    pairs, codes = np.unique(np.stack([index, which], axis=1), axis=0, return_inverse=True)
    code = names[pairs[:, 1]]
    folded = np.where(code == 0, digests[pairs[:, 0]], _mix(digests[pairs[:, 0]] ^ _mix(code)))
    dictionary = prefix.dictionary.take(pa.array(pairs[:, 0]))
    return pa.DictionaryArray.from_arrays(pa.array(codes.reshape(-1), pa.int32()), dictionary), folded, code
