"""A row's result built from what the engine answered."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pipeline.results import ErrorKind, RowResult
from pipeline.sampling import Sampling, check_answer
from pipeline.worker.engine import Choice, Classified, Generation, Labelled

if TYPE_CHECKING:
    from pipeline.worker.tool_calls import AutoTools


def labelled(
    index: int, labels: tuple[str, ...], probs: list[float], out: Labelled | Classified, shard: str, t0: float
) -> RowResult:
    """The likeliest label, every label's probability, and the first one's as the row's score."""
    return RowResult(
        index,
        label=labels[probs.index(max(probs))],
        label_probs=probs,
        score=probs[0],
        prompt_tokens=out.prompt_tokens,
        cached_tokens=getattr(out, "cached_tokens", 0),
        shard=shard,
        latency_s=time.perf_counter() - t0,
    )


def answered(
    index: int, gen: Generation, sampling: Sampling, tools: AutoTools | None, shard: str, t0: float
) -> RowResult:
    """A row's result from the engine's answer (or answers: ``sampling.n``), each checked (``checked``); the row
    fails when no answer is usable."""
    answer, parsed, problem = checked(gen.text, gen.finish_reason, sampling, tools)
    result = RowResult(
        index,
        answer=answer,
        answer_json=parsed,
        prompt_tokens=gen.prompt_tokens,
        cached_tokens=gen.cached_tokens,
        completion_tokens=gen.completion_tokens,
        shard=shard,
        latency_s=time.perf_counter() - t0,
        finish_reason=gen.finish_reason,
        logprobs=gen.logprobs,
    )
    if gen.choices is not None:
        each = [(c, *checked(c.text, c.finish_reason, sampling, tools)) for c in gen.choices]
        result.choices = [choice_entry(c, text, parsed, problem) for c, text, parsed, problem in each]
        result.answer_json = result.choices[0]["answer_json"]
        problems = [problem for *_, problem in each if problem is not None]
        problem = problems[0] if len(problems) == len(each) else None
    if problem is not None:
        result.fail(ErrorKind.OUTPUT, problem)
    return result


def checked(
    text: str, finish_reason: str | None, sampling: Sampling, tools: AutoTools | None
) -> tuple[str, str | None, str | None]:
    """An answer as the row keeps it (``answer_text``), its JSON, and what is wrong with it: a JSON-schema answer's
    JSON, checked (``check_answer``); a tool_choice "auto" answer's calls (``AutoTools.read``: then the text is what
    the answer says beside them)."""
    if tools is not None:
        content, calls = tools.read(text)
        return answer_text(content, sampling), calls, None
    answer = answer_text(text, sampling)
    return answer, *check_answer(answer, sampling, finish_reason == "length")


def answer_text(text: str, sampling: Sampling) -> str:
    """An answer's text as the row keeps it: stripped unless the job says not."""
    return text if sampling.strip is False else text.strip()


def choice_entry(c: Choice, text: str, parsed: str | None, problem: str | None) -> dict:
    """One of a row's several answers, with its own check's outcome."""
    return {
        "answer": text,
        "finish_reason": c.finish_reason,
        "completion_tokens": c.completion_tokens,
        "answer_json": parsed,
        "error": None if problem is None else f"{ErrorKind.OUTPUT}: {problem}",
        "logprobs": c.logprobs,
    }
