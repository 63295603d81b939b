"""Arrow string columns holding a text on some rows only, as views of the same bytes, so that a document's text is
not copied for each of its rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipeline.prefix_memory import value_bounds


def on_first_rows(texts: pa.Array, first: np.ndarray, n: int) -> pa.Array:
    """A column of ``n`` rows holding ``texts[i]`` on row ``first[i]`` and null elsewhere; a view where ``first``
    ascends."""
    texts = texts.cast(pa.large_string())
    order = np.argsort(first, kind="stable")
    if (order != np.arange(len(order))).any():
        texts, first = texts.take(pa.array(order)), first[order]
    starts = np.zeros(n + 1, np.int64)
    starts[first + 1] = 1
    bounds = value_bounds(texts)[np.cumsum(starts)]  # row r: from the start of the values before it
    valid = np.zeros(n, bool)
    valid[first] = True
    return pa.Array.from_buffers(
        pa.large_string(),
        n,
        [pa.array(valid).buffers()[1], pa.py_buffer(bounds), texts.buffers()[2]],
        null_count=n - len(first),
    )


def only_on(texts: pa.Array, rows: np.ndarray) -> pa.Array:
    """``texts`` with every row but the ascending ``rows`` null, as a view of the same text."""
    valid = np.zeros(texts.offset + len(texts), bool)
    valid[texts.offset + rows] = True
    _, offsets, data = texts.buffers()
    return pa.Array.from_buffers(
        texts.type,
        len(texts),
        [pa.array(valid).buffers()[1], offsets, data],
        null_count=len(texts) - len(rows),
        offset=texts.offset,
    )


def packed(texts: pa.Array, rows: np.ndarray) -> pa.Array:
    """The values of ``texts`` on the ascending ``rows`` as an array of their own: a view where they are adjacent,
    else a copy."""
    bounds = value_bounds(texts)
    if len(rows) and np.array_equal(bounds[rows[1:]], bounds[rows[:-1] + 1]):
        own = np.append(bounds[rows], bounds[rows[-1] + 1])
        return pa.Array.from_buffers(pa.large_string(), len(rows), [None, pa.py_buffer(own), texts.buffers()[2]])
    return texts.take(pa.array(rows))
