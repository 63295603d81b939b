"""A finished batch job's output (one response line per request, as ``python -m pipeline run``
writes it: pipeline/jobs/openai_batch.py) split into OpenAI's two files: the output file (the
requests answered, their lines as the job wrote them) and the error file (the requests that
failed, in OpenAI's error shape: ``"response": {"status_code", "request_id", "body": {"error":
{"message", "type", "param", "code"}}}``). Read and written a line at a time."""
from __future__ import annotations

import json
from pathlib import Path

# a row's error starts with its group (docs/usage.md, "Errors per row"): the request's own fault,
# or the service's
CLIENT_GROUPS = ("input", "output")


def split(job_output: Path, answered: Path, failed: Path) -> tuple[int, int]:
    """Write ``answered`` and ``failed`` from the job's output; their numbers of lines."""
    counts = [0, 0]
    with open(job_output, encoding="utf-8") as src, open(answered, "w", encoding="utf-8") as ok, \
            open(failed, "w", encoding="utf-8") as bad:
        for line in src:
            row = json.loads(line)
            if row["error"] is None:
                ok.write(line)
                counts[0] += 1
            else:
                bad.write(json.dumps(error_line(row), ensure_ascii=False) + "\n")
                counts[1] += 1
    return counts[0], counts[1]


def error_line(row: dict) -> dict:
    """A failed request's output line in OpenAI's error-file shape."""
    message = str(row["error"])
    group = message.split(":", 1)[0]
    client_fault = group in CLIENT_GROUPS
    error = {"message": message, "type": "invalid_request_error" if client_fault else "server_error",
             "param": None, "code": None}
    response = {"status_code": 400 if client_fault else 500, "request_id": row["response"]["request_id"],
                "body": {"error": error}}
    return {"id": row["id"], "custom_id": row["custom_id"], "response": response, "error": None}
