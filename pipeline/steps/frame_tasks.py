"""A Dask DataFrame job's first and last steps on the workers; the steps between are every cluster job's. A row's
position is its partition's number and its place there (``frame_positions``)."""

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
    """Partition ``number`` of the input as prompt rows, with its figures and index."""
    columns = spec.source
    assert isinstance(columns, RowColumns)
    table = pa.Table.from_pandas(frame[columns.all], preserve_index=False)  # missing values -> null
    rows = prompt_rows_of(table, frame_positions(number, len(frame)), spec.task, columns)
    return rows, Figures.of_read(len(frame), rows.errors.column("error")), frame.index


def frame_tail_of(read: tuple[PromptRows, Figures, pd.Index]) -> tuple[pa.Table, pd.Index]:
    """What the merge needs of the read, so the read itself can go once it is split."""
    return read[0].errors, read[2]


def frame_merge_task(tail: tuple[pa.Table, pd.Index], number: int, out_columns: list[str], *answers: pa.Table | None):
    """Partition ``number``'s output in the input's row order and with its index: the rows that failed reading and
    every bucket's answers."""
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
