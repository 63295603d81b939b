"""Batch lines answered as several rows each: completion lines with several prompts, and score or rerank lines. Each
row has a position of its own, so a rerun answers only the rows not committed, and the line's carry travels as
JSON text in the merged part's ``id`` column."""

from __future__ import annotations

import json
from typing import Iterator

import pyarrow as pa

from pipeline.data.openai_output import Envelope, LineError, OutputLine, encode


def carry_column(carries: list[dict]) -> pa.Array:
    return pa.array([json.dumps(c, ensure_ascii=False) for c in carries], pa.string())


def by_line(rows: list[dict]) -> Iterator[list[tuple[dict, dict]]]:
    """Groups a merged part's rows by line, in order, as each line's ``(carry, row)`` pairs."""
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
    """The line's error line if it or any of its rows failed, naming the failed ``item`` by its index; else None."""
    failed = next(((c, r) for c, r in group if r["error"] is not None), None)
    if failed is None:
        return None
    carry, error = failed[0], failed[1]["error"]
    if "index" in carry and item is not None:
        kind, _, why = error.partition(": ")
        error = f"{kind}: {item} {carry['index']}: {why}" if why else f"{item} {carry['index']}: {error}"
    return _encoded(number, group, 400, error=LineError.of(error))


def answered_line(number: int, group: list[tuple[dict, dict]], body) -> str:
    return _encoded(number, group, 200, body=body)


def _encoded(
    number: int, group: list[tuple[dict, dict]], status: int, body=None, error: LineError | None = None
) -> str:
    response = Envelope(status_code=status, request_id=f"pipeline-batch-{number}", body=body)
    return encode(
        OutputLine(id=f"pipeline-{number}", custom_id=group[0][0]["custom_id"], response=response, error=error)
    )


def row_tokens(group: list[tuple[dict, dict]]) -> tuple[int, int]:
    """The line's prompt and cached tokens, summed over its rows."""
    return sum(r["prompt_tokens"] or 0 for _, r in group), sum(r["cached_tokens"] or 0 for _, r in group)
