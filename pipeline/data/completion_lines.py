"""OpenAI batch lines for ``/v1/completions``: raw prompts continued with no chat template, one row per prompt,
gathered back into one ``text_completion``.

A line's prompts are cut at the last blank line, else the last line end, of the text they all begin with, and a
lone prompt at its last blank line. The part before the cut may be shared, so rows with alike parts land on one
shard that prefills it once. The cut falls where the whitespace before that line end starts, because byte-level
BPE splits text at whitespace runs and the pieces must tokenize as the whole prompt does."""

from __future__ import annotations

import os
from typing import Any

from pipeline.data.fanned_lines import answered_line, by_line, error_line, row_tokens
from pipeline.data.openai_format import CompletionBody, RequestLine, read_as
from pipeline.data.openai_output import (
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    PromptTokensDetails,
    Usage,
)
from pipeline.data.scoring_lines import wrong_url
from pipeline.names import COMPLETIONS_URL


def completion_request(request: Any, adapters=frozenset()) -> tuple[dict | None, str | None]:
    """A parsed ``/v1/completions`` line as ``{"prompts", "row"}`` and None, or None and why it is not one."""
    line, why = read_as(request, RequestLine)
    if line is None:
        return None, why
    if line.url != COMPLETIONS_URL:
        return None, wrong_url(line.url, COMPLETIONS_URL)
    body, why = read_as(line.body, CompletionBody, "body")
    if body is None:
        return None, why
    why = body.refused() or _prompt_fault(body.prompt)
    if why:
        return None, why
    prompts = body.prompt if isinstance(body.prompt, list) else [body.prompt]
    row = body.sampling()
    if body.model in adapters:
        row["adapter"] = body.model
    return {"prompts": prompts, "row": row}, None


def _prompt_fault(prompt: Any) -> str | None:
    if prompt is None:
        return "body.prompt is missing"
    if isinstance(prompt, str):
        return None
    if not isinstance(prompt, list) or not prompt:
        return "body.prompt must be a text or a non-empty list of texts"
    if all(isinstance(p, int) for p in prompt) or all(isinstance(p, list) for p in prompt):
        return "body.prompt: token ids are not supported; give the prompt as text"
    bad = next((i for i, p in enumerate(prompt) if not isinstance(p, str)), None)
    return None if bad is None else f"body.prompt[{bad}] is not text"


def shared_length(prompts: list[str]) -> int:
    """How much of each of a line's prompts is the part it may share; 0 for none."""
    common = os.path.commonprefix(prompts)
    end = common.rfind("\n\n")
    if end < 0 and len(prompts) > 1:
        end = common.rfind("\n")
    return len(common[:end].rstrip()) if end > 0 else 0


def line_rows(line: int, request, error: str | None, adapters=frozenset()) -> list[tuple]:
    """A line's rows as ``(row or None, error or None, carry)``: one per prompt, or one error row for a bad line."""
    custom_id = request.get("custom_id") if isinstance(request, dict) else None
    if error is None:
        completion, error = completion_request(request, adapters)
    if error is not None:
        return [(None, error, {"line": line, "custom_id": custom_id})]
    assert completion is not None  # no error means a request
    prompts = completion["prompts"]
    cut = shared_length(prompts)
    return [
        (
            {**completion["row"], "prefix": p[:cut] or None, "prompt": p[cut:]},
            None,
            {"line": line, "custom_id": custom_id, "index": i},
        )
        for i, p in enumerate(prompts)
    ]


def lines_of(rows: list[dict], first: int, model: str, created: int, max_tokens: int = 16) -> str:
    """A merged part's rows as output lines numbered from ``first``; ``max_tokens`` tells a choice cut at it."""
    return "".join(_line(first + k, group, model, created, max_tokens) + "\n" for k, group in enumerate(by_line(rows)))


def _line(number: int, group: list[tuple[dict, dict]], model: str, created: int, max_tokens: int) -> str:
    failed = error_line(number, group, "prompt" if len(group) > 1 else None)
    if failed is not None:
        return failed
    prompt, cached = row_tokens(group)
    answers = [a for _, r in group for a in _answers(r)]
    output = sum(a["completion_tokens"] or 0 for a in answers)
    choices = [
        CompletionChoice(
            index=i,
            text=a["answer"] or "",
            finish_reason=a["finish_reason"] or ("length" if (a["completion_tokens"] or 0) >= max_tokens else "stop"),
            logprobs=None if a.get("logprobs") is None else _logprobs(a["logprobs"]),
        )
        for i, a in enumerate(answers)
    ]
    usage = Usage(
        prompt_tokens=prompt,
        completion_tokens=output,
        total_tokens=prompt + output,
        prompt_tokens_details=PromptTokensDetails(cached),
    )
    return answered_line(
        number, group, Completion(id=f"cmpl-{number}", created=created, model=model, usage=usage, choices=choices)
    )


def _answers(row: dict) -> list[dict]:
    return row.get("choices") or [
        {
            "answer": row["answer"],
            "finish_reason": row.get("finish_reason"),
            "completion_tokens": row["completion_tokens"],
            "logprobs": row.get("logprobs"),
        }
    ]


def _logprobs(tokens: list[dict]) -> CompletionLogprobs:
    """The answer's log-probabilities in the legacy shape, with each token's offset in the answer."""
    offsets, at = [], 0
    for t in tokens:
        offsets.append(at)
        at += len(t["token"])
    return CompletionLogprobs(
        tokens=[t["token"] for t in tokens],
        token_logprobs=[t["logprob"] for t in tokens],
        top_logprobs=[{x["token"]: x["logprob"] for x in t["top_logprobs"]} for t in tokens],
        text_offset=offsets,
    )
