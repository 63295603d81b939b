"""A batch file fails as a whole, before anything runs, where OpenAI's Batch API and ``vllm
run-batch`` refuse it: a line without a custom_id (or one that is not a string), a line for
another endpoint than the file's. The message names the line; ``run`` exits 2 and writes nothing.
A line's other faults stay that line's error row (a url that names no endpoint too, as vLLM
answers it); vLLM's own run-batch test inputs run. The service's side: tests/unit/test_service.py."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import load_config, prepare_job
from pipeline.data.errors import JobError
from pipeline.data.request_lines import first_bad_line
from pipeline.data.scoring_lines import SCORING

ROOT = Path(__file__).resolve().parents[2]
CHAT = "/v1/chat/completions"


def line(custom_id="r", url=CHAT, **body) -> bytes:
    request = {"method": "POST", "url": url, "body": body or {"messages": [{"role": "user", "content": "hi"}]}}
    if custom_id is not ...:
        request["custom_id"] = custom_id
    return json.dumps(request).encode()


@pytest.mark.parametrize(
    "lines, endpoint, found",
    [
        (
            [line("a"), b"", b"  ", line("b"), line(...)],
            CHAT,
            (3, "missing_required_parameter", "custom_id is missing"),
        ),
        ([line("a"), line(7)], CHAT, (2, "missing_required_parameter", "custom_id must be a non-empty string (got 7)")),
        ([line("")], CHAT, (1, "missing_required_parameter", 'custom_id must be a non-empty string (got "")')),
        (
            [line("a"), line("b", "/v1/embeddings", input="x")],
            CHAT,
            (2, "mismatched_endpoint", "url '/v1/embeddings' is not this file's endpoint (/v1/chat/completions)"),
        ),
        ([line("a", "/v1/moderations", input="x"), line("b", "/bad_url")], CHAT, None),  # (no endpoint: an error line)
        (
            [line("a", "/v1/score", text_1="q", text_2="d"), line("b", "/v1/rerank", query="q", documents=["d"])],
            SCORING,
            None,
        ),  # (a scoring file may mix the two)
        ([line("a"), b"not json", b'{"custom_id": "c", "url": "/v1/chat/completions", "body": 3}'], CHAT, None),
    ],
)
def test_the_first_line_that_fails_the_file_is_named(lines, endpoint, found):
    bad = first_bad_line(lines, endpoint)
    if found is None:
        assert bad is None
    else:
        assert (bad.line, bad.code) == found[:2] and bad.message.startswith(f"line {found[0]}: {found[2]}")


def test_run_refuses_such_a_file_with_exit_2_and_writes_nothing(tmp_path):
    src = tmp_path / "batch.jsonl"
    src.write_bytes(b"\n".join([line("a"), line("b"), line(...)]) + b"\n")
    out = tmp_path / "out.jsonl"
    with pytest.raises(JobError, match=r"batch.jsonl: line 3: custom_id is missing; every request needs its own"):
        prepare_job(src, out, config=load_config(), notify=lambda m: None)
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(src), str(out), "--engine", "fake"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "line 3: custom_id is missing" in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch.jsonl"]
