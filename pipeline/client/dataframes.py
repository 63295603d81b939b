"""Dask DataFrames in and out: ``Pipeline.map_dataframe``.

    import dask.dataframe as dd
    ddf = dd.read_parquet("s3://bucket/questions/", storage_options={...})
    with Pipeline() as p:
        answers = p.map_dataframe(ddf)        # runs the job now
        answers.to_parquet("s3://bucket/answers/")   # or .compute(), .join(ddf), ...

What runs when: ``map_dataframe`` runs the job when it is called. The returned Dask DataFrame
holds the answers, one pandas DataFrame per input partition, kept in the cluster's memory: same
partitions, same index, same divisions. Computing it, or writing it, reads the kept answers and
does not run the model again.

Where the rows go (``jobs.path``, as for file jobs): by default the job runs on the cluster
(``FrameSteps`` below, pipeline/jobs/cluster_job.py): the workers compute the input partitions,
build the prompts, group every row of the job by document, answer and merge each partition's
answers; no row passes through this process. With ``jobs.path: client`` it takes the
client-side feed: the cluster computes the input partitions, ``prefetch`` ahead; the client
pulls one partition at a time and feeds its rows to the router; client memory is then bounded
by about ``1 + prefetch`` partitions and the read-ahead window.
"""
from __future__ import annotations

from collections import deque
from typing import Iterator

import pyarrow as pa

from pipeline.client.in_order import InOrder
from pipeline.jobs.answer_files import PANDAS_TYPES as _DTYPES
from pipeline.jobs.row_checks import RowColumns
from pipeline.results import JSON_FIELD, RESULT_FIELDS, RowResult
from pipeline.sampling import ROW_COLUMNS
from tasks import get_task_kind, task_columns

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

    rows_total = None   # for the dashboard's progress: known up front for a pandas frame, else once all read
    if isinstance(df, pd.DataFrame):
        rows_total = len(df)
        import dask

        with dask.config.set({"dataframe.convert-string": False}):   # (lists of messages stay lists)
            df = dd.from_pandas(df, chunksize=max(1, pipeline.config.intake.read_ahead_rows), sort=False)
    if not isinstance(df, dd.DataFrame):
        raise DataFrameInputError(f"map_dataframe takes a Dask or pandas DataFrame (got {type(df).__name__})")
    config = pipeline.config.for_job(task, prompt, sampling)
    columns = task_columns(config)
    names = list(df.columns)
    missing = columns.missing(names)
    if missing:
        raise DataFrameInputError(f"the DataFrame {missing}; it has: {', '.join(map(str, names)) or '(none)'}")
    wants_json = config.sampling.json_schema is not None or "json_schema" in names
    out_columns = output_columns(wants_json)
    meta = pd.DataFrame({n: pd.Series(dtype=_DTYPES[n]) for n in out_columns},
                        index=df._meta.index[:0])
    # The user's partitions as they are (selecting columns first would let Dask's optimizer merge
    # small partitions: seen, 3 Parquet files read as 2); only the task's columns are used.
    parts = df.to_delayed()
    if len(parts) != df.npartitions:
        raise DataFrameInputError(f"the DataFrame has {df.npartitions} partitions but Dask gave {len(parts)}")
    if _on_cluster(config):
        from pipeline.jobs.cluster_job import ClusterJob   # start time: loaded by DataFrame jobs only

        steps = FrameSteps(parts, RowColumns.of(columns, names), out_columns, rows_total)
        ClusterJob(steps, config, truncate_prompts).run(pipeline, progress=False)
        futures = steps.frames
    else:
        futures = _on_client(pipeline, config, parts, names, columns, out_columns, meta, truncate_prompts,
                             prefetch, rows_total)
    return dd.from_delayed(futures, meta=meta, divisions=df.divisions, verify_meta=False)


def _on_cluster(config) -> bool:
    """Whether the job runs on the cluster (``jobs.path``; module docstring)."""
    return config.jobs.path != "client"


class _FramePart:
    def __init__(self, index: int):
        self.index = index


class FrameSteps:
    """A Dask DataFrame job's steps on the cluster (pipeline/jobs/cluster_job.py): each input
    partition computed and read on a worker (pipeline/jobs/frame_tasks.py), answers kept in
    memory, each partition's answers merged into a pandas DataFrame with the input's index
    (``frames``: one future per partition, in order, once the job has run)."""
    resumed = 0

    def __init__(self, parts: list, columns: RowColumns, out_columns: list[str], rows_total: int | None):
        from pipeline.jobs.cluster_tasks import kept_answer_task

        self.answer = kept_answer_task
        self.parts, self.columns, self.out_columns = parts, columns, out_columns
        self.rows_total = rows_total
        self.frames: list = []
        self._tails: dict = {}   # partition -> what its merge needs of its read (``frame_tail_of``)

    def committed(self) -> int:
        return 0

    def partitions(self) -> list:
        return [_FramePart(i) for i in range(len(self.parts))]

    def spec(self, **fields):
        from pipeline.jobs.cluster_tasks import JobSpec

        return JobSpec(source=self.columns, folder=None, schema=None, **fields)

    def read(self, client, spec, part, key: str, resources: dict | None = None):
        """(``resources`` is not asked for: a DataFrame's partition is read where the cluster
        computed it, which may be a worker serving no shard.)"""
        from pipeline.jobs.cluster_job import PLAN_PRIORITY
        from pipeline.jobs.frame_tasks import frame_read_task, frame_tail_of

        frame = client.compute(self.parts[part.index], priority=PLAN_PRIORITY)   # on the cluster, read beside it
        read = client.submit(frame_read_task, spec, frame, part.index, key=key, priority=PLAN_PRIORITY)
        # (what the merge needs of the read, kept: the read itself is let go once split)
        self._tails[part.index] = client.submit(frame_tail_of, read, key=f"{key}-tail", priority=PLAN_PRIORITY)
        return read

    def split(self, client, spec, read, place, part, key: str, resources: dict | None = None):
        """(``resources`` is not asked for: a DataFrame's split reads nothing again.)"""
        from pipeline.jobs.cluster_job import PLAN_PRIORITY
        from pipeline.jobs.cluster_tasks import split_task

        return client.submit(split_task, read, place, key=key, priority=PLAN_PRIORITY)

    def key_checks(self, client, spec) -> list:   # (rows are keyed by the frame's index)
        return []

    def rows_merged(self) -> int:   # (every partition is read)
        return 0

    def rows_counted(self, rows: int) -> None:   # (nothing to resume: no record kept)
        pass

    def task_kind(self, config, tokenizer):
        return get_task_kind(config, tokenizer)

    def complete(self, client, spec, todo: list, unreadable: dict, answers: dict) -> list:
        """Each partition's answers merged on the cluster (waited for, not fetched)."""
        from distributed import wait

        from pipeline.jobs.cluster_tasks import kept_piece
        from pipeline.jobs.frame_tasks import frame_merge_task

        job = spec.job_id
        merges = []
        for p in todo:
            pieces = [client.submit(kept_piece, a, p.index, key=f"{job}-kept-{p.index}-{b}")
                      for b, a in answers.items()]
            merges.append(client.submit(frame_merge_task, self._tails.pop(p.index), p.index, self.out_columns,
                                        *pieces, key=f"{job}-merge-{p.index}"))
        wait(merges)
        for f in merges:
            if f.status != "finished":
                f.result()   # raises the task's error
        self.frames = merges
        return []


def _on_client(pipeline, config, parts: list, names: list, columns, out_columns: list[str], meta,
               truncate_prompts: bool, prefetch: int, rows_total: int | None) -> list:
    """The client-side feed (module docstring): the output partitions' futures, in order. The
    cluster computes the input partitions, ``prefetch`` ahead; each one's rows go to the
    pipeline, and once all of them are answered (and every earlier partition's) its output
    partition is made here and kept on the cluster."""
    import pandas as pd   # start time: loaded by DataFrame jobs only
    from dask import delayed

    client = pipeline.client
    read = [c for c in columns.all if c in names] + [c for c in ROW_COLUMNS if c in names and c not in columns.all]
    parts = [delayed(_columns)(part, read) for part in parts]
    futures: list = []

    def whole(index, results: list[RowResult]) -> None:
        cols = {n: pd.Series([getattr(r, n) for r in results], dtype=_DTYPES[n], index=index) for n in out_columns}
        futures.append(client.scatter(pd.DataFrame(cols, index=index) if cols else meta, hash=False))

    order = InOrder(whole=whole)
    for r in pipeline.stream(_rows(client, order, parts, prefetch), task=get_task_kind(config, pipeline.tokenizer),
                             sampling=config.sampling, truncate_prompts=truncate_prompts, rows_total=rows_total):
        order.place(r)
    missing = order.close()
    if missing or len(futures) != len(parts):
        raise RuntimeError(f"{missing} rows got no result from the pipeline")
    return futures


def _columns(frame, names: list[str]):
    return frame[names]


def _rows(client, order: InOrder, parts: list, prefetch: int) -> Iterator[dict]:
    """The rows of each input partition (computed on the cluster, ``prefetch`` ahead), each
    partition a group of ``order`` (its index, for its output partition)."""
    pending: deque = deque()
    todo = iter(parts)
    for _ in range(len(parts)):
        while len(pending) < 1 + max(0, prefetch):
            nxt = next(todo, None)
            if nxt is None:
                break
            pending.append(client.compute(nxt))
        frame = pending.popleft().result()
        group = order.open(frame.index, len(frame))
        if not len(frame):
            order.drain()
            continue
        table = pa.Table.from_pandas(frame, preserve_index=False)   # missing values -> None
        del frame
        names = table.column_names
        k = 0
        for batch in table.to_batches(max_chunksize=ROWS_AT_ONCE):   # Python objects for a slice at a time
            values = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
            for row in zip(*values):
                order.send(group, k)
                k += 1
                yield dict(zip(names, row))
