"""A Parquet job's input cut into partitions, from the files' footers only (the client reads no
row): each partition is a run of consecutive rows of one file, read by one Dask task on a
worker (pipeline/jobs/prompt_table.py). Partitions follow row groups where they can; a row
group larger than twice the partition size is read in slices.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Partition:
    index: int          # its place in the input (the output's part number)
    file: int           # index into the source's files
    row_groups: tuple[int, ...]   # the file's row groups it reads
    skip: int           # rows of the first row group before it
    rows: int
    start: int          # position of its first row in the whole input

    @property
    def stop(self) -> int:
        return self.start + self.rows


def plan_partitions(row_groups: list[list[int]], partition_rows: int) -> list[Partition]:
    """``row_groups``: per file, the rows of each row group (``ParquetSource.row_groups``).
    Whole row groups are gathered up to ``partition_rows`` rows; a larger one is cut into
    slices of about that size. Every row is in exactly one partition, in input order."""
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
