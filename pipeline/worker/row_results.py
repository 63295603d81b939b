"""A row's result built from what the engine answered."""

from __future__ import annotations

import time

from pipeline.results import ErrorKind, RowResult
from pipeline.sampling import Sampling
from pipeline.worker.engine import Choice, Classified, Labelled


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
