"""Adapters side by side: the pipeline (a Parquet job whose rows name LoRA adapters, on a cluster
started with them) against plain vLLM (one ``LLM`` per shard from a clean environment,
pipeline/bench/standalone.py) given the same prompts, each with its row's ``LoRARequest``, each
shard's rows as the pipeline placed them, sorted by (adapter, document) -- the order a user would
hand-sort them in.

    .venv/bin/python -m pipeline.bench.adapter_bench [--adapters 4] [--docs 64] [--questions 3] [--pairs 3]

The adapters are made with PEFT for the default model (pipeline/bench/adapters.py); every question
is asked with every adapter (adapters x documents x questions rows), shuffled; ``engine.max_loras`` 2.
Prints rows/s of each run, the median ratio, the rows whose answers
differ from plain vLLM's, and the engines' settings and environments side by side.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import engine_env
from pipeline.bench.adapters import make_adapter
from pipeline.bench.env_report import engine_env_report, print_engines
from pipeline.bench.standalone import StandaloneShards
from pipeline.bench.workloads import document_questions
from pipeline.client.pipeline import Pipeline
from pipeline.config import load_config
from pipeline.jobs.job import run_job
from pipeline.model import resolve_model


def rows_of(docs: int, questions: int, names: list[str], seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = [
        {"document": r["document"], "question": r["question"], "adapter": name}
        for r in document_questions(docs, questions, seed=seed, order="grouped")
        for name in names
    ]
    rng.shuffle(rows)
    return [{"id": k, **r} for k, r in enumerate(rows)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.bench.adapter_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=None, help="cluster.yaml (default: the repository's)")
    ap.add_argument("--adapters", type=int, default=4)
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument("--questions", type=int, default=3, help="questions per document, each asked with every adapter")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--max-loras", type=int, default=2)
    args = ap.parse_args(argv)
    user_env = engine_env.process_environ()  # (before any cluster starts: the reference's environment)
    base = load_config(args.config)
    model = resolve_model(base)
    work = Path(tempfile.mkdtemp(prefix="adapter-bench-"))
    folders = {f"a{k}": make_adapter(model, work / f"a{k}", seed=k + 1) for k in range(args.adapters)}
    config = base.replace(
        scheduler={"dashboard_address": None},
        intake={"first_answer_rows": 0},
        model={"adapters": folders},
        engine={"max_loras": args.max_loras},
    )
    with Pipeline(config) as pipeline:
        stats = pipeline.worker_stats()

        def encode(text):
            return pipeline.tokenizer.encode(text, add_special_tokens=False)

        with StandaloneShards(pipeline.config, pipeline.model, environ=user_env) as shards:
            envs = engine_env_report(pipeline, shards)
            runs, differ = [], []
            for pair in range(args.pairs):
                rows = rows_of(args.docs, args.questions, list(folders), seed=pair)
                prompts = [encode(p.prefix) + encode(p.suffix) for p in map(pipeline.task.split, rows)]
                src, out = work / f"in-{pair}.parquet", work / f"out-{pair}.parquet"
                pq.write_table(pa.Table.from_pylist(rows), src)
                order = ("pipeline", "vllm") if pair % 2 == 0 else ("vllm", "pipeline")
                took = {}
                for who in order:
                    shards.reset_cache()
                    pipeline.reset_cache()
                    if who == "pipeline":
                        t0 = time.perf_counter()
                        run_job(pipeline, src, out, progress=False)
                        took[who] = time.perf_counter() - t0
                        continue
                    placed: list[dict[str, Any]]  # (the output's rows, or a stand-in)
                    placed = (
                        pq.read_table(out, columns=["id", "shard"]).to_pylist()
                        if out.exists()
                        else [{"id": k, "shard": shards.shards[k % len(shards.shards)]} for k in range(len(rows))]
                    )
                    assignment: dict[str, list[int]] = {name: [] for name in shards.shards}
                    for r in placed:
                        assignment[r["shard"]].append(r["id"])
                    for ks in assignment.values():
                        ks.sort(key=lambda k: (rows[k]["adapter"], rows[k]["document"], k))
                    took[who], _, outputs, _ = shards.run(
                        {
                            name: [(prompts[k], folders[rows[k]["adapter"]]) for k in ks]
                            for name, ks in assignment.items()
                        }
                    )
                    plain = {k: o.text.strip() for name, ks in assignment.items() for k, o in zip(ks, outputs[name])}
                answers = pq.read_table(out, columns=["answer", "error"]).to_pylist()
                differ.append(sum(a["answer"] != plain[k] for k, a in enumerate(answers)))
                runs.append({k: len(rows) / v for k, v in took.items()})
                print(
                    f"pair {pair + 1}: pipeline {runs[-1]['pipeline']:.2f} rows/s, plain vLLM sorted by (adapter, "
                    f"document) {runs[-1]['vllm']:.2f}; ratio {runs[-1]['pipeline'] / runs[-1]['vllm']:.3f}; answers "
                    f"differing {differ[-1]} of {len(rows)}; "
                    f"error rows {sum(a['error'] is not None for a in answers)}",
                    flush=True,
                )
    ratios = [r["pipeline"] / r["vllm"] for r in runs]
    print(
        f"\nrows/s ratio pipeline / plain vLLM (median of {len(runs)} pairs, {len(rows)} rows, {args.adapters} "
        f"adapters, max_loras {args.max_loras}, {len(config.shards)} shards): {statistics.median(ratios):.3f}  "
        f"(each: {', '.join(f'{x:.3f}' for x in ratios)})"
    )
    print_engines(stats, shards.settings, envs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
