"""Text columns as Python values, with undecodable values turned into row errors.

pyarrow reads a Parquet string column without checking its UTF-8; converting an invalid
value to Python then fails for the whole batch. Here only the bad rows fail.
Null, empty and non-text values pass through: the task kind reports those.
"""
from __future__ import annotations

import pyarrow as pa


def text_values(column: pa.Array, name: str) -> tuple[list, list[str | None]]:
    """(values, errors): a value per row, and per row None or why the row fails (an
    ``ErrorKind.INPUT`` error; the caller gives it its kind)."""
    n = len(column)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        try:
            column.validate(full=True)
            return column.to_pylist(), [None] * n
        except pa.ArrowInvalid:
            column = column.view(pa.large_binary() if pa.types.is_large_string(column.type) else pa.binary())
    if not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        return column.to_pylist(), [None] * n  # numbers etc.: the task says "not text"
    values: list = []
    errors: list[str | None] = []
    for raw in column.to_pylist():
        if raw is None:
            values.append(None)
            errors.append(None)
            continue
        try:
            values.append(raw.decode("utf-8"))
            errors.append(None)
        except UnicodeDecodeError as exc:
            values.append(None)
            errors.append(f"{name} is not valid UTF-8 text (byte {exc.start})")
    return values, errors
