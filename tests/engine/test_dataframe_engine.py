"""A Dask DataFrame through the real engine: partitions of uneven size, an index that is not a
range, answers aligned with their rows."""

import dask.dataframe as dd
import pandas as pd
import pyarrow.parquet as pq


def test_dask_dataframe_round_trip(pipeline):
    sample = pq.read_table("datasets/sample.parquet").to_pandas()
    rows = sample.iloc[:24].copy()
    rows.index = pd.Index([f"row-{i * 7 % 24:02d}" for i in range(len(rows))], name="key")  # not a range, unsorted
    pieces = [rows.iloc[:3], rows.iloc[3:4], rows.iloc[4:17], rows.iloc[17:]]  # 3, 1, 13, 7 rows
    ddf = dd.concat([dd.from_pandas(p, npartitions=1, sort=False) for p in pieces])
    assert ddf.npartitions == 4

    answers = pipeline.map_dataframe(ddf)
    assert answers.npartitions == 4 and list(answers.columns[:2]) == ["answer", "error"]
    for i, piece in enumerate(pieces):  # partition by partition: same rows, same index
        part = answers.get_partition(i).compute()
        assert list(part.index) == list(piece.index)
    out = answers.compute()
    joined = ddf[["expected"]].compute().join(out)
    assert joined["error"].isna().all()
    right = sum(e.lower() in a.lower() for e, a in zip(joined["expected"], joined["answer"]))
    assert right >= 0.8 * len(joined), joined[["expected", "answer"]]
    assert (out["completion_tokens"] > 0).all()
