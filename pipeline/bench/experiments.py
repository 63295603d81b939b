"""``python -m pipeline bench --experiments``: the reuse burst through a running pipeline at
several batch sizes (``run_batch_sweep``), and a big job in miniature with and without
grouping by document (``run_grouping``)."""
from __future__ import annotations

from pipeline.bench.contenders import Prepared, run_pipeline
from pipeline.bench.options import BenchOptions, burst_rows
from pipeline.bench.workloads import document_questions
from pipeline.client.pipeline import Pipeline
from pipeline.config import Config


def _drive(pipeline, job: Config, prep: Prepared) -> dict:
    """One pipeline run of ``prep`` with ``job``'s settings, summarized for the experiments."""
    r = run_pipeline(pipeline, job, prep, "experiment", 0)
    return {"requests": r.requests, "answered": r.answered - r.errors, "wall_s": r.wall_s,
            "requests_per_s": r.requests_per_s, "cached_share": r.cached_tokens / max(1, r.prompt_tokens),
            "prefill_over_ideal": r.prefill_computed / r.ideal_prefill,
            "prefill_over_block_ideal": r.prefill_computed / r.ideal_prefill_blocks,
            "encoded_over_raw": r.encoded_bytes / max(1, r.raw_bytes), "batches": pipeline.transfer.batches}


def run_grouping(config: Config, docs: int = 300, questions_per_doc: int = 3, kv_blocks: int = 96,
                 filler_sentences: int = 12, seed: int = 0) -> dict:
    """A big job in miniature: each document's rows scattered through the input, documents
    totalling several times the shards' KV cache. Cached share with and without grouping."""
    # A small KV cache per shard (kv_blocks blocks), so the documents far exceed it.
    cfg = config.replace(engine={"extra": {**config.engine.extra, "num_gpu_blocks_override": kv_blocks}},
                         scheduler={"dashboard_address": None})
    rows = document_questions(docs, questions_per_doc, filler_sentences=filler_sentences, seed=seed, order="shuffled")
    with Pipeline(cfg) as p:
        prep = Prepared.build(rows, p.task, p.tokenizer, p.router.block_size, len(cfg.shards))
        kv = sum(s["kv_cache_tokens"] for s in p.worker_stats())
        unique_prefix_tokens = sum(len(t) for t in {tuple(t): t for t in prep.prefix_ids}.values())
        total_prompt = sum(len(a) + len(b) for a, b in zip(prep.prefix_ids, prep.suffix_ids))
        out = {"documents": docs, "questions_per_doc": questions_per_doc, "kv_cache_tokens_all_shards": kv,
               "document_tokens": unique_prefix_tokens, "documents_over_kv": unique_prefix_tokens / max(1, kv),
               "ideal_cached_share": 1 - prep.ideal_prefill / total_prompt,
               "block_ideal_cached_share": 1 - prep.ideal_prefill_blocks / total_prompt}
        for grouped in (True, False):
            job = cfg.replace(routing={"group_by_prefix": grouped})
            out["grouped" if grouped else "arrival_order"] = _drive(p, job, prep)
    return out


def run_batch_sweep(pipeline, sizes=(8, 16, 32, 64, 128), opts: BenchOptions | None = None) -> list[dict]:
    """The reuse burst through the running pipeline at several batch sizes (client-side only)."""
    opts = opts or BenchOptions()
    base = pipeline.config
    prep = Prepared.build(burst_rows("reuse", opts, opts.seed + 7), pipeline.task, pipeline.tokenizer,
                          pipeline.router.block_size, len(base.shards))
    out = []
    for size in sizes:
        job = base.replace(intake={"batch_size": size, "queue_per_shard": max(size, base.intake.queue_per_shard)})
        out.append({"batch_size": size, **_drive(pipeline, job, prep)})
    return out
