"""A file job's input cut into partitions without reading a row in the client. A Parquet partition is a run of rows
of one file that follows row groups where it can. A JSONL partition is a range of bytes whose rows are counted
only when read, so a row's position is the block's number, then its place in the block."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

PARTITION_BITS = 32  # JSONL and DataFrame positions: partition number, then place


@dataclass(frozen=True)
class Partition:
    index: int  # the output's part number
    file: int  # index into the source's files
    row_groups: tuple[int, ...]  # the file's row groups it reads
    skip: int  # rows of the first row group before it
    rows: int
    start: int  # position of its first row in the whole input

    @property
    def stop(self) -> int:
        return self.start + self.rows


def plan_partitions(row_groups: list[list[int]], partition_rows: int) -> list[Partition]:
    """Gathers whole row groups up to ``partition_rows`` rows and slices a row group of over twice that, in input
    order."""
    if partition_rows < 1:
        raise ValueError("partition_rows must be at least 1")
    out: list[Partition] = []
    position = 0

    def add(file: int, groups: list[int], skip: int, rows: int) -> None:
        nonlocal position
        out.append(Partition(len(out), file, tuple(groups), skip, rows, position))
        position += rows

    for f, sizes in enumerate(row_groups):
        groups: list[int] = []
        rows = 0
        for g, size in enumerate(sizes):
            if size > 2 * partition_rows:
                if groups:
                    add(f, groups, 0, rows)
                    groups, rows = [], 0
                slices = -(-size // partition_rows)
                step = -(-size // slices)
                for skip in range(0, size, step):
                    add(f, [g], skip, min(step, size - skip))
                continue
            if groups and rows + size > partition_rows:
                add(f, groups, 0, rows)
                groups, rows = [], 0
            groups.append(g)
            rows += size
        if groups and rows:
            add(f, groups, 0, rows)
    return out


@dataclass(frozen=True)
class ByteBlock:
    """A range of a JSONL file's bytes whose rows are the lines that start after its first byte."""

    index: int
    offset: int
    length: int
    file: int = 0
    rows: None = None  # not known until read

    @property
    def start(self) -> int:
        return self.index << PARTITION_BITS


def plan_blocks(size: int, block_bytes: int) -> list[ByteBlock]:
    """A file of ``size`` bytes in blocks of ``block_bytes`` (at least one block)."""
    if block_bytes < 1:
        raise ValueError("block_bytes must be at least 1")
    return [
        ByteBlock(i, offset, min(block_bytes, size - offset))
        for i, offset in enumerate(range(0, max(size, 1), block_bytes))
    ]


@dataclass(frozen=True)
class PartNumber:
    """A partition known only by its number, as a DataFrame's or a stream window's are."""

    index: int


def runs(keys: np.ndarray):
    """(key, start, stop) of each run of equal values in sorted ``keys``."""
    cuts = np.flatnonzero(np.diff(keys)) + 1
    for lo, hi in zip(np.concatenate(([0], cuts)).tolist(), np.concatenate((cuts, [len(keys)])).tolist()):
        yield int(keys[lo]), lo, hi


def by_partition(table: pa.Table, partition: np.ndarray) -> dict[int, pa.Table]:
    """``table`` cut by ``partition`` (one number per row), each piece sorted by position."""
    if not table.num_rows:
        return {}
    order = np.lexsort((table.column("position").to_numpy(), partition))
    table = table.take(pa.array(order))
    return {number: table.slice(lo, hi - lo) for number, lo, hi in runs(partition[order])}
