"""Embeddings side by side: the pipeline (task embed: a Parquet job on the warm cluster, as a
user runs it) against plain vLLM's ``LLM.embed`` (one process per shard from a clean environment,
pipeline/bench/standalone.py), on the same model, cores and texts; then every embedding of a
sample against the model's own reference computed without vLLM (transformers, mean pooling,
normalised, as the model card says).

    .venv/bin/python -m pipeline.bench.embed [--rows 4000] [--pairs 3] [--check 1000] [--warm 1000]

The texts are retrieval passages (the bench's documents, ~170 MiniLM tokens each), split between
the reference's shards as the pipeline's placement splits them, alternating which contender runs
first. Prints rows/s of each run, the median ratio, the engines' settings and environments side by
side, and the smallest cosine.
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
from pipeline.jobs.job import run_job
from pipeline.model import MINILM_NAME


def texts_of(rows: int, seed: int) -> list[str]:
    return [r["document"] for r in document_questions(rows, 1, seed=seed)]


def reference(model_path: str, texts: list[str], max_length: int = 256) -> np.ndarray:
    """The model card's embeddings, computed without vLLM (transformers): the last hidden states'
    mean over the real tokens, normalised; texts cut to ``max_length`` tokens as
    sentence-transformers cuts them (also the engine test's reference)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModel.from_pretrained(model_path).eval()
    out = []
    for i in range(0, len(texts), 32):
        enc = tokenizer(texts[i : i + 32], padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).float()
        out.append(torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=1).numpy())
    return np.concatenate(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.bench.embed", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=None, help="cluster.yaml (default: the repository's)")
    ap.add_argument("--model", default=MINILM_NAME, help="the embedding model (model.path)")
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--check", type=int, default=1000, help="rows whose cosine to the reference is checked")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warm", type=int, default=1000, help="rows each contender embeds first, unmeasured")
    args = ap.parse_args(argv)
    user_env = engine_env.process_environ()  # (before any cluster starts: the reference's environment)
    config = load_config(args.config).replace(
        model={"path": args.model}, task="embed", scheduler={"dashboard_address": None}, intake={"first_answer_rows": 0}
    )
    work = Path(tempfile.mkdtemp(prefix="embed-bench-"))
    with Pipeline(config) as pipeline:
        stats = pipeline.worker_stats()
        with StandaloneShards(pipeline.config, pipeline.model, environ=user_env) as shards:
            envs = engine_env_report(pipeline, shards)
            plain_settings = shards.settings
            warm, warm_texts = work / "warm.parquet", texts_of(args.warm, 99)
            pq.write_table(pa.table({"document": warm_texts}), warm)
            run_job(pipeline, warm, work / "warm-out.parquet", progress=False)
            shards.run({name: warm_texts[k :: len(shards.shards)] for k, name in enumerate(shards.shards)})
            runs = []
            for pair in range(args.pairs):
                texts = texts_of(args.rows, args.seed + pair)
                src = work / f"in-{pair}.parquet"
                pq.write_table(pa.table({"id": list(range(len(texts))), "document": texts}), src)
                order = ("pipeline", "vllm") if pair % 2 == 0 else ("vllm", "pipeline")
                took = {}
                for who in order:
                    if who == "pipeline":
                        t0 = time.perf_counter()
                        run_job(pipeline, src, work / f"out-{pair}.parquet", progress=False)
                        took[who] = time.perf_counter() - t0
                    else:
                        # the pipeline's own split of these rows between the shards; the texts, as a
                        # user hands them to LLM.embed (vLLM tokenizes them, as the pipeline's workers do)
                        placed: list[dict[str, Any]]  # (the output's rows, or a stand-in)
                        placed = (
                            pq.read_table(work / f"out-{pair}.parquet", columns=["id", "shard"]).to_pylist()
                            if (work / f"out-{pair}.parquet").exists()
                            else [{"id": k, "shard": shards.shards[k % len(shards.shards)]} for k in range(len(texts))]
                        )
                        assignment: dict[str, list] = {}
                        for row in placed:
                            assignment.setdefault(row["shard"], []).append(texts[row["id"]])
                        took[who] = shards.run(assignment)[0]
                runs.append({"pair": pair, **{k: len(texts) / v for k, v in took.items()}})
                print(
                    f"pair {pair + 1}: pipeline {runs[-1]['pipeline']:.1f} rows/s, plain vLLM LLM.embed "
                    f"{runs[-1]['vllm']:.1f} rows/s, ratio {runs[-1]['pipeline'] / runs[-1]['vllm']:.3f}",
                    flush=True,
                )
        out = pq.read_table(work / "out-0.parquet").to_pylist()
    ratios = [r["pipeline"] / r["vllm"] for r in runs]
    print(
        f"\nrows/s ratio pipeline / plain vLLM (median of {len(runs)} pairs, {args.rows} rows, "
        f"{len(config.shards)} shards): {statistics.median(ratios):.3f}  (each: "
        f"{', '.join(f'{x:.3f}' for x in ratios)})"
    )
    print_engines(stats, plain_settings, envs)
    texts = texts_of(args.rows, args.seed)[: args.check]
    ref = reference(pipeline.model, texts)
    cosines = [
        float(np.dot(row["embedding"], r) / np.linalg.norm(row["embedding"]) / np.linalg.norm(r))
        for row, r in zip(out, ref)
    ]
    errors = sum(row["error"] is not None for row in out)
    print(
        f"cosine to the transformers reference over {len(cosines)} rows: min {min(cosines):.5f}, "
        f"rows below 0.99: {sum(c < 0.99 for c in cosines)}; error rows in the job: {errors}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
