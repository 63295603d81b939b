"""``python -m pipeline bench``: the pipeline side by side with standalone vLLM, in one run.

Contenders (all warm, same model, engine arguments and greedy sampling):
  standalone-rr      one plain vLLM process per shard, prompts split round-robin
  standalone-routed  the same processes, each document's rows on the shard the pipeline's
                     placement gives it, each shard's rows grouped by document (as its
                     answer tasks take them)
  standalone-arrival the same placement, each shard's rows in arrival order
  standalone-sorted  standalone-routed's split (its name on the big job)
  pipeline           this pipeline with its configuration (``Pipeline.stream``; the bigjob
                     burst: as a file job; the completions burst: as a file job of
                     /v1/completions lines, standalone given the same prompts as token ids)
Protocol: for each burst, ``pairs`` rounds; in each round every contender runs the same
rows (fresh documents per round) from an empty prefix cache, in an order that reverses
every round. The clock covers the burst only. A fake-engine run measures the plumbing.

Here: ``run_bench`` and the plumbing run. The command's options are in pipeline/cli/bench.py,
the bench's in ``options``; a contender's run is in ``contenders``, the medians in ``summary``,
the engines' environments in ``env_report``, the machine in ``machine``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict

from tqdm import tqdm

from pipeline import engine_env
from pipeline.bench.contenders import (
    Prepared,
    RunResult,
    run_pipeline,
    run_pipeline_job,
    run_pipeline_lines,
    run_standalone,
)
from pipeline.bench.cpu_share import Roles
from pipeline.bench.env_report import engine_env_report
from pipeline.bench.machine import machine_description
from pipeline.bench.options import ALL_CONTENDERS, CONTENDERS, BenchOptions, burst_rows
from pipeline.bench.standalone import StandaloneShards
from pipeline.bench.summary import summarize
from pipeline.bench.workloads import document_questions
from pipeline.client.pipeline import Pipeline
from pipeline.config import Config

__all__ = ["CONTENDERS", "BenchOptions", "run_bench", "run_plumbing"]

# the bursts the pipeline runs as file jobs (the others: ``Pipeline.stream``)
PIPELINE_RUNS = {"bigjob": run_pipeline_job, "completions": run_pipeline_lines}


def _task(burst: str, pipeline):
    """The task kind whose prompts a burst's rows are: the completion task's for the completions
    burst (raw prompts, no chat template), else the pipeline's."""
    if burst == "completions":
        from tasks import Completion

        return Completion()
    return pipeline.task


def run_plumbing(config: Config, questions: int, seed: int = 0) -> dict:
    """Questions/s through ``Pipeline.stream``'s path (windows, placement, Dask, the result
    path) with an engine that answers at once."""
    rows = document_questions(max(1, questions // 4), 4, filler_sentences=12, seed=seed, order="interleaved")
    cfg = config.replace(scheduler={"dashboard_address": None})
    with Pipeline(cfg, engine="fake") as p:
        p.run(rows[:200])  # warm
        p.reset_cache()
        t0 = time.perf_counter()
        n = sum(1 for _ in p.stream(rows))
        wall = time.perf_counter() - t0
        return {"questions": n, "wall_s": wall, "questions_per_s": n / wall}


def run_bench(config: Config, opts: BenchOptions, *, pipeline=None, progress: bool | None = None) -> dict:
    """Run every contender on every burst; return the report (see pipeline/bench/report.py)."""
    if progress is None:
        progress = sys.stderr.isatty()
    # The reference is plain vLLM as a user runs it: started from this process's environment as
    # it is before any cluster starts (an embedded cluster's nannies write into it; Pipeline puts
    # it back), the one the C library hands to child processes.
    user_env = engine_env.process_environ()
    own = pipeline is None
    started = time.perf_counter()
    if own:
        pipeline = Pipeline(config).start()
    # Throughput side by side: the pipeline's runs fill its engines at once, as the reference does
    # (the first-answer ramp trades ~1.7 s of a burst for a first answer within ~2 s;
    # advanced.intake.first_answer_rows in docs/configuration.md).
    job = pipeline.config.replace(intake={"first_answer_rows": 0})
    try:
        stats = pipeline.worker_stats()
        engine_start = {s["shard"]: s["engine_start_s"] for s in stats}
        engine_settings = {s["shard"]: s.get("engine_settings", {}) for s in stats}
        with StandaloneShards(pipeline.config, pipeline.model, environ=user_env) as shards:
            roles = Roles(shards.pids)
            engine_envs = engine_env_report(pipeline, shards)
            results: list[RunResult] = []
            bs, n_shards = pipeline.block_size, len(pipeline.config.shards)
            warm = Prepared.build(
                burst_rows("reuse", BenchOptions(docs=4, questions_per_doc=2), 99),
                pipeline.task,
                pipeline.tokenizer,
                bs,
                n_shards,
            )
            run_standalone("standalone-rr", shards, warm, None, "warm", -1)
            run_pipeline(pipeline, job, warm, "warm", -1)
            if {"bigjob", "completions"} & set(opts.bursts):  # the cluster job path's first run loads its modules
                run_pipeline_job(pipeline, job, warm, "warm", -1)
            contenders = tuple(c for c in ALL_CONTENDERS if c in opts.contenders)
            total = len(opts.bursts) * opts.pairs * len(contenders)
            with tqdm(total=total, disable=not progress, unit="run", desc="bench") as bar:
                for b, burst in enumerate(opts.bursts):
                    for pair in range(opts.pairs):
                        prep = Prepared.build(
                            burst_rows(burst, opts, opts.seed + 1000 * b + pair),
                            _task(burst, pipeline),
                            pipeline.tokenizer,
                            bs,
                            n_shards,
                        )
                        order = contenders if pair % 2 == 0 else tuple(reversed(contenders))
                        for c in order:
                            bar.set_description(f"{burst} pair {pair + 1}/{opts.pairs} {c}")
                            if c == "pipeline":
                                run = PIPELINE_RUNS.get(burst, run_pipeline)
                                results.append(run(pipeline, job, prep, burst, pair, roles))
                            else:
                                results.append(run_standalone(c, shards, prep, pipeline, burst, pair, roles))
                            bar.update(1)
            standalone_start = dict(shards.start_s)
            standalone_settings = dict(shards.settings)
        plumbing = run_plumbing(config, opts.null_questions, opts.seed) if opts.null_questions else None
    finally:
        if own:
            pipeline.close()
    return {
        "options": asdict(opts),
        "config": config.model_dump(),
        "machine": machine_description(),
        "engine_start_s": {"pipeline": engine_start, "standalone": standalone_start},
        "engine_env": engine_envs,
        "engine_settings": {"pipeline": engine_settings, "standalone": standalone_settings},
        "summary": summarize(results),
        "plumbing": plumbing,
        "runs": [x.as_dict() for x in results],
        "total_s": time.perf_counter() - started,
    }
