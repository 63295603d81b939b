"""Splits a batch job's output into OpenAI's output file, with the answered requests' lines as the job wrote them,
and error file, with the failed ones in OpenAI's error shape."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.data.answer_files import ANSWER_SCHEMA
from pipeline.data.chat_tools import tool_mode
from pipeline.data.openai_output import ApiError, Envelope, ErrorBody, LineError, OutputLine, decode, encode
from pipeline.jobs.openai_batch import LINES_OF, output_line
from pipeline.results import RESULT_FIELDS, RowResult

# A row's error starts with its group; these groups are the request's own fault, the others the service's.
CLIENT_GROUPS = ("input", "output")


class BatchUsage:
    """Sums the answered requests' ``usage`` as OpenAI's Batch object gives it."""

    def __init__(self):
        self.input = self.output = self.cached = 0

    def add(self, row: OutputLine) -> None:
        body = row.response.body if row.response is not None else None
        usage = body.get("usage") if isinstance(body, dict) else None
        if not isinstance(usage, dict):
            return
        self.input += usage.get("prompt_tokens") or 0
        self.output += usage.get("completion_tokens") or 0
        self.cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0

    def shown(self) -> dict:
        return usage_of(self.input, self.cached, self.output)


def usage_of(input_tokens: int, cached: int, output: int) -> dict:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output,
    }


def split(job_output: Path, answered: Path, failed: Path) -> tuple[int, int, dict]:
    """Writes ``answered`` and ``failed`` from the job's output; returns their line counts and the usage."""
    counts = [0, 0]
    usage = BatchUsage()
    with (
        open(job_output, encoding="utf-8") as src,
        open(answered, "w", encoding="utf-8") as ok,
        open(failed, "w", encoding="utf-8") as bad,
    ):
        for line in src:
            counts[0 if _sort(line, ok, bad, usage) else 1] += 1
    return counts[0], counts[1], usage.shown()


def _sort(line: str, ok, bad, usage: BatchUsage) -> bool:
    """Writes a job's output line to ``ok`` if it was answered, else its error line to ``bad``; True if answered."""
    row = decode(line)
    if row.error is None:
        ok.write(line)
        usage.add(row)
        return True
    bad.write(encode(error_line(row)) + "\n")
    return False


def error_line(row: OutputLine) -> OutputLine:
    """A failed request's output line in OpenAI's error-file shape."""
    message, code = (row.error.message, row.error.code) if row.error is not None else ("", None)
    client_fault = code in CLIENT_GROUPS
    error = ApiError(message=message, type="invalid_request_error" if client_fault else "server_error", code=code)
    request_id = row.response.request_id if row.response is not None else f"pipeline-batch-{row.id}"
    return OutputLine(
        id=row.id,
        custom_id=row.custom_id,
        response=Envelope(status_code=400 if client_fault else 500, request_id=request_id, body=ErrorBody(error)),
    )


# The error of a request the batch did not answer, in OpenAI's words for an expired one.
UNANSWERED = {
    "expired": ("batch_expired", "This request could not be executed before the completion window expired."),
    "cancelled": ("batch_cancelled", "This request could not be executed before the batch was cancelled."),
}


def split_partial(job, answered: Path, failed: Path, why: str) -> tuple[int, int, dict]:
    """Splits the committed answers of a job that was let go, as ``split`` does, with an error line for each request
    not answered, in input order. A fanned-out request counts as answered only when all its rows were committed."""
    code, message = UNANSWERED[why]
    sink, lines = job.sink, job.steps.lines
    answers = _fanned_answers if lines.fans_out else _request_answers
    counts = [0, 0]
    usage = BatchUsage()
    position = 0
    with open(answered, "w", encoding="utf-8") as ok, open(failed, "w", encoding="utf-8") as bad:
        for block in sink.partitions:
            for custom_id, line in answers(job.steps.source, block, _committed(sink, block), lines, position):
                if line is None:
                    unanswered = OutputLine(
                        id=f"pipeline-{position}", custom_id=custom_id, response=None, error=LineError(code, message)
                    )
                    bad.write(encode(unanswered) + "\n")
                    counts[1] += 1
                else:
                    counts[0 if _sort(line + "\n", ok, bad, usage) else 1] += 1
                position += 1
    return counts[0], counts[1], usage.shown()


def _request_answers(source, block, done: dict[int, dict], lines, first: int):
    """Each request of a block in order, as (custom_id, its output line or None if its answer was not committed)."""
    from pipeline.data.request_rows import parse_line
    from pipeline.steps.jsonl_input import block_lines

    for place, raw in enumerate(block_lines(source, block)):
        request, _ = parse_line(raw)
        custom_id = request.get("custom_id") if isinstance(request, dict) else None
        row = done.get(place)
        yield (
            custom_id,
            None
            if row is None
            else output_line(
                first + place,
                custom_id,
                RowResult(first + place, **row),
                lines.model,
                lines.max_tokens,
                lines.created,
                lines.endpoint,
                tool_mode(request),
            ),
        )


def _fanned_answers(source, block, done: dict[int, dict], lines, first: int):
    """Each line of a block of fanned-out requests as (custom_id, its output line, None unless all its rows were
    committed)."""
    from pipeline.steps.jsonl_input import fanned_rows

    lines_of = LINES_OF[lines.endpoint]
    group: list[tuple[int, dict]] = []  # one line's rows: (place in the block, carry)
    for place, (_, _, carry) in enumerate([*fanned_rows(source, block), (None, None, None)]):
        if group and (carry is None or carry["line"] != group[0][1]["line"]):
            rows = [{"id": json.dumps(c, ensure_ascii=False), **done[p]} for p, c in group if p in done]
            whole = len(rows) == len(group)
            yield (
                group[0][1]["custom_id"],
                lines_of(rows, first, lines.model, lines.created, lines.max_tokens).rstrip("\n") if whole else None,
            )
            first += 1
            group = []
        if carry is not None:
            group.append((place, carry))


def _committed(sink, block) -> dict[int, dict]:
    """A block's committed result fields by the row's place in the block; a row answered twice keeps its first
    answer."""
    files = sink.files
    if files.merged(block.index):
        table = files.folder.read_table(files.part_path(block.index), schema=sink.schema)
        fields = [n for n in RESULT_FIELDS[1:] if n in table.column_names]
        return dict(enumerate(table.select(fields).to_pylist()))
    out: dict[int, dict] = {}
    for path in files.answer_files(block.index):
        table = files.folder.read_table(path, schema=ANSWER_SCHEMA)
        fields = [n for n in RESULT_FIELDS[1:] if n in table.column_names]
        for row in table.select(["position", *fields]).to_pylist():
            out.setdefault(row.pop("position") - block.start, row)
    return out
