"""Runs on the workers: a Dask DataFrame job's first and last step (``Pipeline.map_dataframe``,
pipeline/client/dataframes.py). The steps between are every cluster job's
(pipeline/steps/cluster_tasks.py).

    frame_read_task (per input partition)  -> PromptRows, figures, the partition's index
    frame_tail_of (per input partition)    -> what its merge needs of the read: the rows that
                                              failed reading, the index (the read itself goes
                                              once it is split)
    frame_merge_task (per input partition) -> a pandas DataFrame of the output columns, in
                                              the partition's row order, with its index

A row's position is its partition's number and its place there (``frame_positions``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.data.answer_files import PANDAS_TYPES, error_table
from pipeline.data.row_checks import RowColumns
from pipeline.steps.cluster_tasks import JobSpec, frame_positions
from pipeline.steps.prompt_table import PromptRows, prompt_rows_of
from pipeline.summary import Figures

if TYPE_CHECKING:
    import pandas as pd


def frame_read_task(spec: JobSpec, frame: pd.DataFrame, number: int) -> tuple[PromptRows, Figures, pd.Index]:
    """Partition ``number`` of the input (a pandas DataFrame) as prompt rows. ``spec.source``:
    the columns the task reads (``RowColumns``)."""
    columns = spec.source
    assert isinstance(columns, RowColumns)  # (a DataFrame job's spec carries its columns: FrameSteps)
    table = pa.Table.from_pandas(frame[columns.all], preserve_index=False)  # missing values -> null
    rows = prompt_rows_of(table, frame_positions(number, len(frame)), spec.task, columns)
    return rows, Figures.of_read(len(frame), rows.errors.column("error")), frame.index


def frame_tail_of(read: tuple[PromptRows, Figures, pd.Index]) -> tuple[pa.Table, pd.Index]:
    """The read partition's rows that failed reading, and its index."""
    return read[0].errors, read[2]


def frame_merge_task(tail: tuple[pa.Table, pd.Index], number: int, out_columns: list[str], *answers: pa.Table | None):
    """Partition ``number``'s output: its rows that failed reading and its answers from every
    bucket (``kept_piece``), in the input's row order, with the input's index (``tail``:
    ``frame_tail_of`` its read)."""
    errors, index = tail
    tables = [error_table(errors.column("position"), errors.column("error"))]
    tables += [a for a in answers if a is not None]
    table = pa.concat_tables(tables)
    table = table.take(pc.sort_indices(table, [("position", "ascending")]))
    expected = frame_positions(number, len(index)).to_numpy()
    if not np.array_equal(table.column("position").to_numpy(), expected):
        raise RuntimeError(
            f"partition {number}: {len(index)} rows but {table.num_rows} results, or results for "
            f"other rows; no answer is returned for it"
        )
    out = table.select(out_columns).to_pandas().astype({n: PANDAS_TYPES[n] for n in out_columns})
    out.index = index
    return out
