"""What makes an OpenAI batch file fail as a whole before any request runs, as OpenAI and ``vllm run-batch`` check
it: a line without a ``custom_id``, or a request for another served endpoint than the first line's, though score
and rerank lines may mix. A line's other faults are its own error row. Only each line's envelope is parsed, so the
whole file is checked cheaply before the job starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from pipeline.data.scoring_lines import SCORING, scoring_kind
from pipeline.names import ENDPOINTS


class _Envelope(msgspec.Struct):
    """The fields read of a line; msgspec skips the rest, the body among them, unparsed."""

    custom_id: Any = None
    url: Any = None


@dataclass(frozen=True)
class BadLine:
    """The first line that fails the file, counted from 1 without blank lines, with OpenAI's error code and what to
    fix."""

    line: int
    code: str
    param: str
    message: str


def first_bad_line(lines, endpoint: str, whose: str = "this file's endpoint") -> BadLine | None:
    """The first of a file's raw ``lines`` that fails a file of ``endpoint``'s requests, or None."""
    decoder = msgspec.json.Decoder(_Envelope)
    number = 0
    for raw in lines:
        if not raw.strip():
            continue
        number += 1
        try:
            envelope = decoder.decode(raw)
        except msgspec.DecodeError:
            continue  # not a JSON object: its own error row
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
            continue  # names no endpoint: its own error row
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
