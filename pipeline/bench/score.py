"""Scores side by side: the pipeline (task score: a Parquet job of (document, query) pairs on the warm
cluster, as a user runs it) against plain vLLM (one ``LLM`` per shard from a clean environment,
pipeline/bench/standalone.py) fed the same prompts and the same one-step label reads, in two
orders: the rows as they arrive (shuffled, split between the shards in turn, as a user wiring vLLM
by hand splits them) and each shard's rows sorted by document (the pipeline's own placement);
then the pipeline's scores against plain vLLM's and against the model's own reference computed
without vLLM (transformers).

    .venv/bin/python -m pipeline.bench.score [--docs 150] [--queries 4] [--pairs 3] [--check 32]

The documents are the bench's retrieval passages (~700 tokens with the prompt), each with
``--queries`` questions about it, shuffled. Prints rows/s of each run, the median ratios, the
engines' settings and environments side by side, and the largest score difference.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import engine_env
from pipeline.bench.env_report import engine_env_report, print_engines
from pipeline.bench.standalone import StandaloneShards
from pipeline.bench.workloads import document_questions
from pipeline.client.pipeline import Pipeline
from pipeline.config import load_config
from tasks.classify import Classify, label_probs


def pairs_of(docs: int, queries: int, seed: int) -> list[dict]:
    return [
        {"id": k, "document": r["document"], "query": r["question"]}
        for k, r in enumerate(document_questions(docs, queries, seed=seed, order="shuffled"))
    ]


def prompt_ids(pipeline, rows: list[dict]) -> list[list[int]]:
    """Each row's prompt as the workers send it: its prefix's tokens, then its suffix's."""

    def encode(text):
        return pipeline.tokenizer.encode(text, add_special_tokens=False)

    parts = [pipeline.task.split(r) for r in rows]
    return [encode(p.prefix) + encode(p.suffix) for p in parts]


def score_of(logprobs: list[float] | None) -> float:
    """The first label's probability over the labels (the worker's score)."""
    if logprobs is None:
        raise ValueError("no label log-probabilities to score: the requests did not read the labels")
    return label_probs(logprobs)[0]


def reference_logprobs(model_path: str, prompts: list[list[int]], label_ids: list[int]) -> np.ndarray:
    """Each label token's log-probability as the next token after each prompt, computed without
    vLLM (transformers, float32): rows x labels."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for ids in prompts:
            logits = model(torch.tensor([ids])).logits[0, -1]
            out.append(torch.log_softmax(logits.float(), -1)[label_ids].numpy())
    return np.array(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.bench.score", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=None, help="cluster.yaml (default: the repository's)")
    ap.add_argument("--docs", type=int, default=150)
    ap.add_argument("--queries", type=int, default=4, help="queries per document")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--check", type=int, default=32, help="rows checked against the transformers reference")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warm", type=int, default=16, help="documents each contender scores first, unmeasured")
    args = ap.parse_args(argv)
    user_env = engine_env.process_environ()  # (before any cluster starts: the reference's environment)
    config = load_config(args.config).replace(
        task="score", scheduler={"dashboard_address": None}, intake={"first_answer_rows": 0}
    )
    work = Path(tempfile.mkdtemp(prefix="score-bench-"))
    with Pipeline(config) as pipeline:
        stats = pipeline.worker_stats()
        with StandaloneShards(pipeline.config, pipeline.model, environ=user_env) as shards:
            envs = engine_env_report(pipeline, shards)
            n = len(shards.shards)
            warm = pairs_of(args.warm, args.queries, 99)
            pq.write_table(pa.Table.from_pylist(warm), work / "warm.parquet")
            run_job_quiet(pipeline, work / "warm.parquet", work / "warm-out.parquet")
            warm_ids = prompt_ids(pipeline, warm)
            shards.run({name: warm_ids[k::n] for k, name in enumerate(shards.shards)})
            runs, plain_scores = [], {}
            for pair in range(args.pairs):
                rows = pairs_of(args.docs, args.queries, args.seed + pair)
                ids = prompt_ids(pipeline, rows)
                src, out = work / f"in-{pair}.parquet", work / f"out-{pair}.parquet"
                pq.write_table(pa.Table.from_pylist(rows), src)
                order = ("pipeline", "arrival", "sorted") if pair % 2 == 0 else ("sorted", "arrival", "pipeline")
                took = {}
                for who in order:
                    shards.reset_cache()
                    pipeline.reset_cache()
                    if who == "pipeline":
                        t0 = time.perf_counter()
                        run_job_quiet(pipeline, src, out)
                        took[who] = time.perf_counter() - t0
                        continue
                    if who == "arrival":
                        assignment = {name: list(range(k, len(rows), n)) for k, name in enumerate(shards.shards)}
                    else:  # the pipeline's placement of these rows, each shard's sorted by document
                        placed: list[dict[str, Any]]  # (the output's rows, or a stand-in)
                        placed = (
                            pq.read_table(out, columns=["id", "shard"]).to_pylist()
                            if out.exists()
                            else [{"id": k, "shard": shards.shards[k % n]} for k in range(len(rows))]
                        )
                        assignment = {name: [] for name in shards.shards}
                        for r in placed:
                            assignment[r["shard"]].append(r["id"])
                        for name in assignment:
                            assignment[name].sort(key=lambda k: (rows[k]["document"], k))
                    took[who], _, outputs, _ = shards.run(
                        {name: [ids[k] for k in ks] for name, ks in assignment.items()}
                    )
                    if pair == 0 and who == "sorted":
                        for name, ks in assignment.items():
                            plain_scores.update({k: score_of(o.labels) for k, o in zip(ks, outputs[name])})
                runs.append({k: len(rows) / v for k, v in took.items()})
                print(
                    f"pair {pair + 1}: pipeline {runs[-1]['pipeline']:.2f} rows/s, plain vLLM in arrival order "
                    f"{runs[-1]['arrival']:.2f}, plain vLLM sorted by document {runs[-1]['sorted']:.2f}; ratios "
                    f"{runs[-1]['pipeline'] / runs[-1]['arrival']:.3f}, "
                    f"{runs[-1]['pipeline'] / runs[-1]['sorted']:.3f}",
                    flush=True,
                )
        scored = pq.read_table(work / "out-0.parquet").to_pylist()
        if not isinstance(pipeline.task, Classify):
            raise TypeError(f"task score's kind is {type(pipeline.task).__name__}, not Classify: it has no labels")
        label_ids = [pipeline.tokenizer.encode(x, add_special_tokens=False)[0] for x in pipeline.task.labels]
        first = pairs_of(args.docs, args.queries, args.seed)
        ref = reference_logprobs(pipeline.model, prompt_ids(pipeline, first[: args.check]), label_ids)
    for contender in ("arrival", "sorted"):
        ratios = [r["pipeline"] / r[contender] for r in runs]
        print(
            f"rows/s ratio pipeline / plain vLLM {contender} (median of {len(runs)} pairs, {len(first)} rows, "
            f"{len(config.shards)} shards): {statistics.median(ratios):.3f}  (each: "
            f"{', '.join(f'{x:.3f}' for x in ratios)})"
        )
    print_engines(stats, shards.settings, envs)
    errors = sum(r["error"] is not None for r in scored)
    vs_plain = max(abs(r["score"] - plain_scores[k]) for k, r in enumerate(scored) if r["error"] is None)
    vs_ref = max(abs(scored[k]["score"] - score_of(list(ref[k]))) for k in range(len(ref)))
    cached = sum(r["cached_tokens"] for r in scored) / max(1, sum(r["prompt_tokens"] for r in scored))
    print(
        f"scores: error rows {errors}; largest difference to plain vLLM's {vs_plain:.4f} ({len(scored)} rows), "
        f"to the transformers float32 reference {vs_ref:.4f} ({len(ref)} rows); pipeline's cached share of "
        f"prompt tokens {cached:.3f}"
    )
    return 0


def run_job_quiet(pipeline, src, out) -> None:
    from pipeline.jobs.job import run_job

    run_job(pipeline, src, out, progress=False)


if __name__ == "__main__":
    raise SystemExit(main())
