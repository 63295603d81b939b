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

The job runs on the cluster (``FrameSteps``, pipeline/jobs/frame_steps.py; pipeline/jobs/cluster_job.py): the workers
compute the input partitions, build the prompts, group every row of the job by document, answer
and merge each partition's answers; no row passes through this process.
"""

from __future__ import annotations

from pipeline.data.answer_files import PANDAS_TYPES as _DTYPES
from pipeline.data.row_checks import RowColumns
from pipeline.model import head_labels
from pipeline.results import output_fields
from tasks import task_columns


class DataFrameInputError(ValueError):
    """The DataFrame cannot be answered as it is (e.g. a column the task needs is missing)."""


def map_dataframe(
    pipeline,
    df,
    *,
    task: str | None = None,
    prompt: dict | None = None,
    sampling: dict | None = None,
    truncate_prompts: bool = False,
):
    """Answer every row of ``df`` (a Dask or pandas DataFrame with the task's columns); a Dask
    DataFrame of the output columns with ``df``'s index and partitions (module docstring).
    ``pipeline``: a started ``Pipeline``."""
    # Start time: pandas and dask.dataframe are loaded by DataFrame jobs only.
    import dask.dataframe as dd
    import pandas as pd

    rows_total = None  # for the dashboard's progress: known up front for a pandas frame, else once all read
    if isinstance(df, pd.DataFrame):
        rows_total = len(df)
        import dask

        with dask.config.set({"dataframe.convert-string": False}):  # (lists of messages stay lists)
            df = dd.from_pandas(df, chunksize=max(1, pipeline.config.intake.read_ahead_rows), sort=False)
    if not isinstance(df, dd.DataFrame):
        raise DataFrameInputError(f"map_dataframe takes a Dask or pandas DataFrame (got {type(df).__name__})")
    config = pipeline.config.for_job(task, prompt, sampling)
    columns = task_columns(config, head_labels(config))
    names = list(df.columns)
    missing = columns.missing(names)
    if missing:
        raise DataFrameInputError(f"the DataFrame {missing}; it has: {', '.join(map(str, names)) or '(none)'}")
    out_columns = output_fields(config.sampling.as_sampling(0), names, config.task)
    meta = pd.DataFrame({n: pd.Series(dtype=_DTYPES[n]) for n in out_columns}, index=df._meta.index[:0])
    # The user's partitions as they are (selecting columns first would let Dask's optimizer merge
    # small partitions: seen, 3 Parquet files read as 2); only the task's columns are used.
    parts = df.to_delayed()
    if len(parts) != df.npartitions:
        raise DataFrameInputError(f"the DataFrame has {df.npartitions} partitions but Dask gave {len(parts)}")
    from pipeline.jobs.cluster_job import ClusterJob  # start time: loaded by DataFrame jobs only
    from pipeline.jobs.frame_steps import FrameSteps

    steps = FrameSteps(parts, RowColumns.of(columns, names), out_columns, rows_total)
    ClusterJob(steps, config, truncate_prompts).run(pipeline, progress=False)
    futures = steps.frames
    import dask

    with dask.config.set({"dataframe.convert-string": False}):  # (list columns stay lists, not their text)
        return dd.from_delayed(futures, meta=meta, divisions=df.divisions, verify_meta=False)
