"""The id check's pieces as the workers run them (pipeline/jobs/key_check.py), without a
cluster: hashes cut into ranges find every repeated id, whichever range and partition its
copies fall in, and only those."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import load_config
from pipeline.data.input import open_source
from pipeline.data.partitions import plan_partitions
from pipeline.jobs.key_check import (
    duplicate_report,
    duplicates_message,
    partition_key_hashes,
    repeated_hashes,
    suspect_keys,
)
from tasks import task_columns


def source_of(tmp_path, ids, row_group_size=7):
    path = tmp_path / "in.parquet"
    pq.write_table(
        pa.table({"id": ids, "document": ["d"] * len(ids), "question": ["q"] * len(ids)}),
        path,
        row_group_size=row_group_size,
    )
    source = open_source(path, "auto", task_columns(load_config()))
    return source, plan_partitions(source.row_groups, 7)


def check(source, partitions, ranges):
    hashes = [partition_key_hashes(source, p, ranges) for p in partitions]
    assert all(len(h) == ranges for h in hashes)
    again = np.concatenate([repeated_hashes(*(h[k] for h in hashes)) for k in range(ranges)])
    return duplicate_report(*(suspect_keys(source, p, again) for p in partitions))


def test_ranges_find_each_repeated_id_across_partitions(tmp_path):
    ids = [f"row-{i}" for i in range(40)]
    ids[33], ids[38], ids[20] = ids[2], ids[2], ids[9]  # row-2 three times (partitions 0, 4, 5), row-9 twice
    source, partitions = source_of(tmp_path, ids)
    assert len(partitions) == 6
    for ranges in (1, 3, 16):
        found, shown = check(source, partitions, ranges)
        assert (found, shown) == (2, [("row-2", 3), ("row-9", 2)])
    msg = duplicates_message("id", found, shown)
    assert "2 id value(s) used by more than one row: 'row-2' (3 times), 'row-9' (2 times)" in msg


def test_unique_ids_and_nulls_pass(tmp_path):
    ids = [None if i % 5 == 0 else i for i in range(30)]  # (a null id is not a key)
    source, partitions = source_of(tmp_path, pa.array(ids, pa.int64()))
    hashes = [partition_key_hashes(source, p, 4) for p in partitions]
    assert sum(len(r) for h in hashes for r in h) == 24
    for k in range(4):  # each range holds only its own hash values
        for h in hashes:
            assert np.all(h[k] >= np.uint64(2**64 // 4 * k))
    assert check(source, partitions, 4) == (0, [])
