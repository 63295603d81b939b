"""Dask DataFrames in and out: ``Pipeline.map_dataframe``.

    import dask.dataframe as dd
    ddf = dd.read_parquet("s3://bucket/questions/", storage_options={...})
    with Pipeline() as p:
        answers = p.map_dataframe(ddf)        # runs the job now
        answers.to_parquet("s3://bucket/answers/")   # or .compute(), .join(ddf), ...

What runs when: ``map_dataframe`` runs the job when it is called. The cluster computes the input
partitions, ``prefetch`` ahead, and only the columns the task reads. The client pulls one
partition at a time and feeds its rows to the same router as every other job, so a document's
questions land on one shard whichever partitions they are in. As each partition's rows are all
answered, its answers become one pandas DataFrame, with the input partition's index, kept in the
cluster's memory. The returned Dask DataFrame is built from those: same partitions, same index,
same divisions. Computing it, or writing it, reads the kept answers and does not run the model
again. Client memory is bounded by about ``1 + prefetch`` partitions and the read-ahead window,
not by the input's size.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Iterator

import pyarrow as pa

from pipeline.results import JSON_FIELD, RESULT_FIELDS, RowResult
from pipeline.sampling import ROW_COLUMNS
from tasks import get_task_kind, task_columns


# The output columns and their pandas dtypes (strings as pyarrow-backed strings).
_DTYPES = {"answer": "string", "error": "string", "prompt_tokens": "int64", "cached_tokens": "int64",
           "completion_tokens": "int64", "shard": "string", "latency_s": "float64", "finish_reason": "string",
           JSON_FIELD: "string"}


# Rows of a pulled partition turned into Python values at a time (the rest stays in Arrow buffers).
ROWS_AT_ONCE = 4096


class DataFrameInputError(ValueError):
    """The DataFrame cannot be answered as it is (e.g. a column the task needs is missing)."""


def output_columns(wants_json: bool) -> list[str]:
    return [n for n in RESULT_FIELDS[1:] if n != JSON_FIELD or wants_json]


def map_dataframe(pipeline, df, *, task: str | None = None, prompt: dict | None = None,
                  sampling: dict | None = None, truncate_prompts: bool = False, prefetch: int = 2):
    """Answer every row of ``df`` (a Dask or pandas DataFrame with the task's columns); a Dask
    DataFrame of the output columns with ``df``'s index and partitions (module docstring).
    ``pipeline``: a started ``Pipeline``."""
    # Start time: pandas and dask.dataframe are loaded by DataFrame jobs only.
    import dask.dataframe as dd
    import pandas as pd
    from dask import delayed

    rows_total = None   # for the dashboard's progress: known up front for a pandas frame, else once all read
    if isinstance(df, pd.DataFrame):
        rows_total = len(df)
        df = dd.from_pandas(df, chunksize=max(1, pipeline.config.intake.read_ahead_rows), sort=False)
    if not isinstance(df, dd.DataFrame):
        raise DataFrameInputError(f"map_dataframe takes a Dask or pandas DataFrame (got {type(df).__name__})")
    config = pipeline.config.for_job(task, prompt, sampling)
    columns = task_columns(config)
    names = list(df.columns)
    missing = columns.missing(names)
    if missing:
        raise DataFrameInputError(f"the DataFrame {missing}; it has: {', '.join(map(str, names)) or '(none)'}")
    read = [c for c in columns.all if c in names] + [c for c in ROW_COLUMNS if c in names and c not in columns.all]
    wants_json = config.sampling.json_schema is not None or "json_schema" in names
    out_columns = output_columns(wants_json)
    meta = pd.DataFrame({n: pd.Series(dtype=_DTYPES[n]) for n in out_columns},
                        index=df._meta.index[:0])
    # The user's partitions as they are (selecting columns first would let Dask's optimizer merge
    # small partitions: seen, 3 Parquet files read as 2), then only the task's columns, selected
    # on the cluster, come to the client.
    parts = [delayed(_columns)(part, read) for part in df.to_delayed()]
    if len(parts) != df.npartitions:
        raise DataFrameInputError(f"the DataFrame has {df.npartitions} partitions but Dask gave {len(parts)}")
    collector = _Partitions(pipeline, out_columns, meta)
    rows = collector.rows(parts, prefetch)
    for r in pipeline.stream(rows, task=get_task_kind(config, pipeline.tokenizer), sampling=config.sampling,
                             truncate_prompts=truncate_prompts, rows_total=rows_total):
        collector.place(r)
    collector.close()
    return dd.from_delayed(collector.futures, meta=meta, divisions=df.divisions, verify_meta=False)


def _columns(frame, names: list[str]):
    return frame[names]


class _Partition:
    def __init__(self, number: int, index, n: int):
        self.number, self.index = number, index
        self.results: list[RowResult | None] = [None] * n
        self.left = n


class _Partitions:
    """Pulls input partitions (computed on the cluster, ``prefetch`` ahead) and turns each one,
    once all its rows are answered, into an output partition kept on the cluster."""

    def __init__(self, pipeline, out_columns: list[str], meta):
        self.client = pipeline.client
        self.out_columns, self.meta = out_columns, meta
        self.where: dict[int, tuple[_Partition, int]] = {}   # row number -> its partition, position
        self.futures: list = []       # one per partition, in order, once done
        self._done: dict[int, Any] = {}
        self.partitions = 0
        self.error: BaseException | None = None

    def rows(self, parts: list, prefetch: int) -> Iterator[dict]:
        pending: deque = deque()
        todo = iter(parts)
        sent = 0
        for number in range(len(parts)):
            while len(pending) < 1 + max(0, prefetch):
                nxt = next(todo, None)
                if nxt is None:
                    break
                pending.append(self.client.compute(nxt))
            frame = pending.popleft().result()
            self.partitions += 1
            part = _Partition(number, frame.index, len(frame))
            if not len(frame):
                self._finish(part)
                continue
            table = pa.Table.from_pandas(frame, preserve_index=False)   # missing values -> None
            del frame
            names = table.column_names
            k = 0
            for batch in table.to_batches(max_chunksize=ROWS_AT_ONCE):   # Python objects for a slice at a time
                values = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
                for row in zip(*values):
                    self.where[sent] = (part, k)
                    sent += 1
                    k += 1
                    yield dict(zip(names, row))

    def place(self, r: RowResult) -> None:
        part, k = self.where.pop(r.index)
        part.results[k] = r
        part.left -= 1
        if not part.left:
            self._finish(part)

    def _finish(self, part: _Partition) -> None:
        import pandas as pd   # start time: loaded by DataFrame jobs only

        cols = {n: pd.Series([getattr(r, n) for r in part.results], dtype=_DTYPES[n], index=part.index)
                for n in self.out_columns}
        frame = pd.DataFrame(cols, index=part.index) if cols else self.meta
        part.results = []
        self._done[part.number] = self.client.scatter(frame, hash=False)

    def close(self) -> None:
        if self.where or len(self._done) != self.partitions:
            raise RuntimeError(f"{len(self.where)} rows got no result from the pipeline")
        self.futures = [self._done[i] for i in range(self.partitions)]
