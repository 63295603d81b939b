"""Batch lines answered as several rows each: a ``/v1/completions`` line with a list of prompts
(a row per prompt: pipeline/data/completion_lines.py) and a ``/v1/score`` or ``/v1/rerank`` line
(a row per pair: pipeline/data/scoring_lines.py).

Each row is an ordinary row of its task, with a position of its own, so a rerun answers the rows
an interrupted run did not commit and the line is whole when merged. What the line's output
needs of a row (its carry: the line's number, the line's custom_id, the row's index in the line,
...) travels as the merged part's ``id`` column, JSON text. ``by_line`` gathers a line's rows
back, in order; a line any of whose rows failed is written as that row's error (``error_line``).
"""

from __future__ import annotations

import json
from typing import Iterator

import pyarrow as pa

from pipeline.data.openai_output import Envelope, LineError, OutputLine, encode


def carry_column(carries: list[dict]) -> pa.Array:
    return pa.array([json.dumps(c, ensure_ascii=False) for c in carries], pa.string())


def by_line(rows: list[dict]) -> Iterator[list[tuple[dict, dict]]]:
    """A merged part's rows (``id``: each row's carry, then the result columns), a line's rows
    together and in order, as each line's ``(carry, row)`` pairs."""
    group: list[tuple[dict, dict]] = []
    for row in rows:
        carry = json.loads(row["id"])
        if group and carry["line"] != group[0][0]["line"]:
            yield group
            group = []
        group.append((carry, row))
    if group:
        yield group


def error_line(number: int, group: list[tuple[dict, dict]], item: str | None) -> str | None:
    """The line's error line where it, or any of its rows, failed (the first failed row's error,
    naming the ``item`` by its index, ``input: prompt 2: prompt is empty``, unless ``item`` is
    None); else None."""
    failed = next(((c, r) for c, r in group if r["error"] is not None), None)
    if failed is None:
        return None
    carry, error = failed[0], failed[1]["error"]
    if "index" in carry and item is not None:
        kind, _, why = error.partition(": ")
        error = f"{kind}: {item} {carry['index']}: {why}" if why else f"{item} {carry['index']}: {error}"
    return encode(
        OutputLine(
            id=f"pipeline-{number}",
            custom_id=group[0][0]["custom_id"],
            error=LineError.of(error),
            response=Envelope(status_code=400, request_id=f"pipeline-batch-{number}"),
        )
    )
