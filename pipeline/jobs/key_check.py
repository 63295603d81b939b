"""Refuses an input that uses a key for two rows, because output rows are matched to input rows by key. Keys are
hashed, 8 bytes a row, and only keys whose hash repeats are compared; a larger job's check runs on the workers,
one task per range of hash values."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipeline.data.errors import JobError
from pipeline.data.partitions import ByteBlock, Partition

DUPLICATES_SHOWN = 10
RANGE_ROWS = 1 << 24  # the hashes one range's task holds, 8 bytes each


def hash_ranges(rows: int) -> int:
    """How many ranges of hash values a job of ``rows`` rows is checked in."""
    return max(1, -(-rows // RANGE_ROWS))


def key_hashes(keys: pa.Array) -> np.ndarray:
    """A 64-bit hash of each non-null key."""
    import pandas as pd  # imported here to keep start-up fast

    keys = keys.drop_null()
    if not len(keys):
        return np.zeros(0, np.uint64)
    return pd.util.hash_array(keys.to_numpy(zero_copy_only=False), categorize=False)


def check_key_type(source) -> None:
    """Keys must be strings or numbers, which hash and compare exactly."""
    key_type = source.key_type
    if source.key and (pa.types.is_nested(key_type) or pa.types.is_dictionary(key_type)):
        raise JobError(f"the {source.key} column has type {key_type}, which cannot key rows; use strings or integers")


def repeated(hashes: np.ndarray) -> np.ndarray:
    """The values that occur more than once in ``hashes``, which it sorts in place."""
    hashes.sort()
    return np.unique(hashes[1:][hashes[1:] == hashes[:-1]])


def count_repeated(keys) -> list[tuple]:
    """(key, count) for each key seen more than once, in first-seen order."""
    counts: dict = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    return [(k, c) for k, c in counts.items() if c > 1]


def duplicates_message(key: str, found: int, shown: list[tuple]) -> str:
    """The refusal for ``found`` repeated keys, listing the first of ``shown``."""
    listed = ", ".join(f"{k!r} ({c} times)" for k, c in shown[:DUPLICATES_SHOWN])
    more = f" and {found - DUPLICATES_SHOWN} more" if found > DUPLICATES_SHOWN else ""
    return (
        f"input has {found} {key} value(s) used by more than one row: {listed}{more}. "
        f"Output rows are matched to input rows by {key}, so the job does not run; "
        f"make them unique, or pass --allow-duplicate-ids (allow_duplicate_ids=True) "
        f"to run anyway (each row still gets its own output row, in input order)"
    )


def check_duplicates(source, allowed: bool) -> None:
    """Checks the whole input's keys in this process."""
    check_key_type(source)
    hashes = [key_hashes(keys) for keys in source.key_arrays()]
    if allowed or not hashes:
        return
    ordered = np.concatenate(hashes)
    del hashes[:]  # free the batches' copies before the in-place sort
    again = repeated(ordered)
    del ordered
    if not len(again):
        return

    def suspects():  # the keys of the repeated hashes, in input order
        for keys in source.key_arrays():
            keys = keys.drop_null()
            if len(keys):
                yield from keys.filter(pa.array(np.isin(key_hashes(keys), again))).to_pylist()

    found = count_repeated(suspects())
    if found:
        raise JobError(duplicates_message(source.key, len(found), found))


# The checks of a job larger than one partition run on the workers.


def _partition_keys(source, part: Partition | ByteBlock) -> pa.Array:
    """``part``'s keys, or none if it cannot be read; its read task reports that, and a rerun checks again."""
    from pipeline.steps.jsonl_input import block_keys
    from pipeline.steps.prompt_table import read_partition
    from pipeline.steps.template_pieces import whole

    try:
        if isinstance(part, ByteBlock):  # a batch file's block of bytes
            return block_keys(source, part)
        return whole(read_partition(source, part, columns=["id"]).column(0))
    except JobError:
        return pa.array([], source.key_type)


def partition_key_hashes(source, part: Partition, ranges: int) -> list[np.ndarray]:
    """Partition ``part``'s key hashes, sorted, cut into ``ranges`` ranges of equal width."""
    hashes = np.sort(key_hashes(_partition_keys(source, part)))
    bounds = [(np.uint64(2**64 // ranges * k)) for k in range(1, ranges)]
    cuts = np.searchsorted(hashes, np.array(bounds, np.uint64)) if bounds else np.zeros(0, np.int64)
    return np.split(hashes, cuts)


def hash_range(hashes: list[np.ndarray], k: int) -> np.ndarray:
    return hashes[k]


def repeated_hashes(*hashes: np.ndarray) -> np.ndarray:
    """The hashes of one range that occur more than once over every partition."""
    return repeated(np.concatenate(hashes)) if hashes else np.zeros(0, np.uint64)


def suspect_keys(source, part: Partition, again: np.ndarray) -> list:
    """Partition ``part``'s keys whose hash is in ``again``, in input order."""
    keys = _partition_keys(source, part).drop_null()
    return keys.filter(pa.array(np.isin(key_hashes(keys), again))).to_pylist() if len(keys) else []


def duplicate_report(*suspects: list) -> tuple[int, list[tuple]]:
    """How many keys occur more than once in the partitions' suspects, and the first of them."""
    found = count_repeated(k for keys in suspects for k in keys)
    return len(found), found[:DUPLICATES_SHOWN]
