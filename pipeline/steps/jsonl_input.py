"""Reads an OpenAI batch JSONL file for a cluster job on the workers, one block of bytes at a time.

A block's rows are the non-blank lines that start in it, since fsspec's ``read_block`` cuts at line ends, so every
line is read by one task. A line that is not a valid request for the file's endpoint becomes an error row with the
text the client-side check gives. Completion and scoring files fan out: a line becomes several rows, and each row's
carry says which line it belongs to."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fsspec.utils import read_block

from pipeline.data import completion_lines, scoring_lines
from pipeline.data.chat_tools import tool_mode
from pipeline.data.errors import JobError
from pipeline.data.fanned_lines import carry_column
from pipeline.data.partitions import ByteBlock
from pipeline.data.request_rows import parse_line, request_row
from pipeline.data.scoring_lines import SCORING
from pipeline.names import COMPLETIONS_URL
from pipeline.steps.prompt_table import PromptRows, prompt_rows_of_dicts


def block_lines(source, block: ByteBlock) -> list[bytes]:
    try:
        with source.open() as f:
            data = read_block(f, block.offset, block.length, delimiter=b"\n")
    except OSError as exc:
        raise JobError(
            f"cannot read {source.path}: {exc.strerror or exc}. The rows of its other blocks are "
            f"answered and kept; run the same command again to resume"
        ) from None
    return [line for line in data.split(b"\n") if line.strip()]


def block_requests(source, block: ByteBlock) -> list[tuple]:
    return [parse_line(line) for line in block_lines(source, block)]


def _custom_id(request):
    return request.get("custom_id") if isinstance(request, dict) else None


def block_keys(source, block: ByteBlock) -> pa.Array:
    """The block's custom_ids for the duplicate check, null where not a string."""
    keys = [_custom_id(r) for r, _ in block_requests(source, block)]
    return pa.array([k if isinstance(k, str) else None for k in keys], pa.string())


# Endpoints whose lines are answered as several rows each, and how a line's rows are made.
FANNED = {SCORING: scoring_lines.line_rows, COMPLETIONS_URL: completion_lines.line_rows}


def fanned_rows(source, block: ByteBlock) -> list[tuple]:
    """Each line's rows as ``(row or None, error or None, carry)``."""
    line_rows = FANNED[source.endpoint]
    return [
        row
        for k, (request, error) in enumerate(block_requests(source, block))
        for row in line_rows(k, request, error, source.adapters)
    ]


def block_carry(source, block: ByteBlock) -> pa.Table:
    """What the output carries of each row, as JSON text: the custom_id as given, or a fanned row's carry."""
    if source.endpoint in FANNED:
        return pa.table({"id": carry_column([carry for _, _, carry in fanned_rows(source, block)])})
    return pa.table({"id": pa.array([_carry(r) for r, _ in block_requests(source, block)], pa.string())})


def _carry(request) -> str:
    """A request's custom_id, with how a chat line's tools are answered where it has tools."""
    mode = tool_mode(request)
    return json.dumps(_custom_id(request) if mode is None else {"custom_id": _custom_id(request), "tool": mode})


def jsonl_prompt_rows(source, task, block: ByteBlock, done: pa.Array | None = None) -> PromptRows:
    """Rows in ``done`` were answered by an earlier run and are left out."""
    if source.endpoint in FANNED:
        return _fanned_prompt_rows(source, task, block, done)
    endpoint = source.endpoint
    requests = block_requests(source, block)
    read = len(requests)
    positions = pa.array(block.start + np.arange(len(requests), dtype=np.int64))
    if done is not None and len(done):
        keep = pc.invert(pc.is_in(positions, value_set=done))
        requests = [r for r, k in zip(requests, keep.to_pylist()) if k]
        positions = positions.filter(keep)
    rows = prompt_rows_of_dicts(
        [
            request_row(r, endpoint, source.adapters, source.tool_parser) if e is None else (None, e)
            for r, e in requests
        ],
        positions,
        task,
        all_sampling=True,
    )
    rows.read = read
    return rows


def _fanned_prompt_rows(source, task, block: ByteBlock, done: pa.Array | None) -> PromptRows:
    """A fanned line's rows answered earlier are left out; the line is made whole again when merged."""
    rows = [(row, error) for row, error, _ in fanned_rows(source, block)]
    read = len(rows)
    positions = pa.array(block.start + np.arange(read, dtype=np.int64))
    if done is not None and len(done):
        keep = pc.invert(pc.is_in(positions, value_set=done))
        rows = [r for r, k in zip(rows, keep.to_pylist()) if k]
        positions = positions.filter(keep)
    out = prompt_rows_of_dicts(rows, positions, task, all_sampling=source.endpoint != SCORING)
    out.read = read
    return out
