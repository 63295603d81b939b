"""The benchmark's options (``BenchOptions``) and the rows of each burst they describe, built
in the benchmark's driver process. The contenders are named here: the report lists them in
this order."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pipeline.bench.workloads import completion_lines, document_questions, skewed_counts

CONTENDERS = ("standalone-rr", "standalone-routed", "pipeline")  # the default contenders
# Every contender, in report order. standalone-arrival and standalone-sorted run for any burst,
# but are the bigjob burst's references: not run unless asked for (--contenders).
ALL_CONTENDERS = ("standalone-rr", "standalone-routed", "standalone-arrival", "standalone-sorted", "pipeline")
BURSTS = ("no_reuse", "reuse", "skewed")  # the default bursts
# bigjob is long, and completions is a file job of /v1/completions lines (a line per document, its
# questions' prompts in one list): each only when asked for (--bursts bigjob,completions)
KNOWN_BURSTS = BURSTS + ("bigjob", "completions")


@dataclass
class BenchOptions:
    pairs: int = 5
    bursts: tuple[str, ...] = BURSTS
    contenders: tuple[str, ...] = CONTENDERS  # "pipeline" and at least one standalone
    docs: int = 64  # documents per burst
    questions_per_doc: int = 4  # reuse burst: 4 x 64 = 256 requests
    skewed_requests: int = 256
    bigjob_docs: int = 480  # bigjob burst: 480 x 3 = 1,440 requests, shuffled; the pipeline
    bigjob_questions: int = 3  # runs it as a file job on the cluster path
    filler_sentences: int = 50  # ~750-790 prompt tokens per request with the default model:
    # a retrieval-sized chunk (12 gave ~260, which hides costs
    # that grow with the prompt)
    null_questions: int = 20_000  # plumbing run (fake engine); 0 skips it
    seed: int = 0


def burst_rows(burst: str, opts: BenchOptions, seed: int) -> list[dict]:
    ask = functools.partial(
        document_questions, filler_sentences=opts.filler_sentences, seed=seed, id_prefix=f"{burst}-"
    )
    if burst == "no_reuse":
        return ask(opts.docs, 1)
    if burst == "reuse":
        # Shuffled, not strictly interleaved: with a strict interleave and an even number of
        # documents, round-robin over 2 shards sends every question of a document to the same
        # shard by parity alone, and "standalone-rr" would silently be prefix-affine.
        return ask(opts.docs, opts.questions_per_doc, order="shuffled")
    if burst == "skewed":
        counts = skewed_counts(opts.docs, opts.skewed_requests, seed=seed)
        return ask(opts.docs, counts, order="shuffled")
    if burst == "bigjob":
        return ask(opts.bigjob_docs, opts.bigjob_questions, order="shuffled")
    if burst == "completions":
        return completion_lines(ask(opts.docs, opts.questions_per_doc, order="grouped"), seed)
    raise ValueError(f"unknown burst {burst!r}; known: {', '.join(KNOWN_BURSTS)}")
