"""What makes an OpenAI batch file fail as a whole, as OpenAI's Batch API and ``vllm run-batch``
validate it before any request runs: a line without a ``custom_id`` (a string: each answer is
matched to its request by it), or a request for another endpoint served here than the file's
(its first line's; a file of scoring requests may mix ``/v1/score`` and ``/v1/rerank``): a file
that mixes endpoints. A line's other faults (not JSON, a bad body, a url that names no endpoint,
as ``vllm run-batch`` answers it) are that line's error row, and the rest of the file is
answered.

Each line's envelope is read with msgspec, its body skipped unparsed, so the whole file is read
before the job starts at a fraction of the cost of parsing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from pipeline.data.scoring_lines import SCORING, scoring_kind
from pipeline.names import ENDPOINTS


class _Envelope(msgspec.Struct):
    """The fields read of a line (msgspec skips the others, the body among them, unparsed)."""

    custom_id: Any = None
    url: Any = None


@dataclass(frozen=True)
class BadLine:
    """The first line that fails the file: its number (from 1, blank lines not counted), OpenAI's
    error code and the field at fault, and what to fix."""

    line: int
    code: str
    param: str
    message: str


def first_bad_line(lines, endpoint: str, whose: str = "this file's endpoint") -> BadLine | None:
    """The first of ``lines`` (a file's raw lines, in order) that fails a file of ``endpoint``'s
    requests (``OpenAIBatchSource.endpoint``, or a batch's endpoint: ``whose`` names it), or None."""
    decoder = msgspec.json.Decoder(_Envelope)
    number = 0
    for raw in lines:
        if not raw.strip():
            continue
        number += 1
        try:
            envelope = decoder.decode(raw)
        except msgspec.DecodeError:
            continue  # (not a JSON object: the line's own error row)
        if not isinstance(envelope.custom_id, str) or not envelope.custom_id:
            got = (
                "is missing"
                if envelope.custom_id is None
                else f"must be a non-empty string (got {msgspec.json.encode(envelope.custom_id).decode()[:40]})"
            )
            return BadLine(
                number,
                "missing_required_parameter",
                "custom_id",
                f"line {number}: custom_id {got}; every request needs its own custom_id, which its answer carries",
            )
        if envelope.url not in ENDPOINTS and scoring_kind(envelope.url) is None:
            continue  # (no endpoint: the line's own error row)
        same = scoring_kind(envelope.url) is not None if endpoint == SCORING else envelope.url == endpoint
        if not same:
            which = "/v1/score or /v1/rerank" if endpoint == SCORING else endpoint
            return BadLine(
                number,
                "mismatched_endpoint",
                "url",
                f"line {number}: url {envelope.url!r} is not {whose} ({which}); a file holds requests for one endpoint",
            )
    return None
