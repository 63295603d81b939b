"""Runs on the workers: an OpenAI batch JSONL file read by a cluster job, a block of its bytes at a
time (``ByteBlock``, pipeline/data/partitions.py). A block's rows are the non-blank lines that
start in it (fsspec's ``read_block`` cuts it at line ends), so every line is read by one task.
A row's position is its block's number, then its place in the block; the output's ids are
numbered in input order when OUTPUT is written (pipeline/jobs/openai_batch.py).

Each line is checked as pipeline/data/input.py says: a line that is not a request for the file's
endpoint (chat completions or embeddings), whose messages the chat template rejects, or whose body's sampling
settings are bad, is an error row with the same text. A file of completion requests
(pipeline/data/completion_lines.py) has a row per prompt of each line, and a file of scoring
requests (``/v1/score``, ``/v1/rerank``: pipeline/data/scoring_lines.py) a row per (query,
document) pair: its positions number the block's rows, its carry says which line each belongs to
(pipeline/data/fanned_lines.py).
"""

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
    """The block's non-blank lines."""
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
    """(request or None, error) per row of the block."""
    return [parse_line(line) for line in block_lines(source, block)]


def _custom_id(request):
    return request.get("custom_id") if isinstance(request, dict) else None


def block_keys(source, block: ByteBlock) -> pa.Array:
    """The block's custom_ids, for the duplicate check (null where not a string)."""
    keys = [_custom_id(r) for r, _ in block_requests(source, block)]
    return pa.array([k if isinstance(k, str) else None for k in keys], pa.string())


# the files whose lines are answered as several rows each, and how a line's rows are made
FANNED = {SCORING: scoring_lines.line_rows, COMPLETIONS_URL: completion_lines.line_rows}


def fanned_rows(source, block: ByteBlock) -> list[tuple]:
    """A block's rows, of a file whose lines are answered as several rows each (``FANNED``): each
    line's rows, ``(row or None, error or None, carry)``."""
    line_rows = FANNED[source.endpoint]
    return [
        row
        for k, (request, error) in enumerate(block_requests(source, block))
        for row in line_rows(k, request, error, source.adapters)
    ]


def block_carry(source, block: ByteBlock) -> pa.Table:
    """What the output carries of each row (JSON text): its custom_id as it was given (null where
    the line has none, or is not JSON), or its ``_carry``; a file whose lines fan out: each row's
    carry."""
    if source.endpoint in FANNED:
        return pa.table({"id": carry_column([carry for _, _, carry in fanned_rows(source, block)])})
    return pa.table({"id": pa.array([_carry(r) for r, _ in block_requests(source, block)], pa.string())})


def _carry(request) -> str:
    """A request's carry: its custom_id, with how a chat line's tools are answered where they are
    (``{"custom_id", "tool"}``: pipeline/data/chat_tools.py)."""
    mode = tool_mode(request)
    return json.dumps(_custom_id(request) if mode is None else {"custom_id": _custom_id(request), "tool": mode})


def jsonl_prompt_rows(source, task, block: ByteBlock, done: pa.Array | None = None) -> PromptRows:
    """The block as prompt rows (``task``: the chat task, the embed task for a file of embedding
    requests, the completion or score task for a file of those requests); rows whose position is
    in ``done`` (answered by an earlier run) are left out."""
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
    """A block of lines that fan out as the task's rows (a row answered by an earlier run left
    out: the line's other rows are answered, and the line is whole when merged)."""
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
