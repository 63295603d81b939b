"""``python -m pipeline bench``: the pipeline side by side with standalone vLLM, in one run.

Contenders (all warm, same model, engine arguments and greedy sampling):
  standalone-rr      one plain vLLM process per shard, prompts split round-robin
  standalone-routed  the same processes, prompts split by the pipeline's prefix router
  pipeline           this pipeline with its configuration
Protocol: for each burst, ``pairs`` rounds; in each round every contender runs the same
rows (fresh documents per round) from an empty prefix cache, in an order that reverses
every round. The clock covers the burst only. A null-engine run measures the plumbing.
"""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import asdict, dataclass, field

from pipeline.config import Config
from pipeline import engine_env
from pipeline.bench.cpu_share import Roles, cores_used, minor_faults
from pipeline.bench.prefill_ideal import block_ideal, token_ideal
from pipeline.bench.workloads import document_questions, skewed_counts

CONTENDERS = ("standalone-rr", "standalone-routed", "pipeline")
BURSTS = ("no_reuse", "reuse", "skewed")


@dataclass
class BenchOptions:
    pairs: int = 5
    bursts: tuple[str, ...] = BURSTS
    contenders: tuple[str, ...] = CONTENDERS   # "pipeline" and at least one standalone
    docs: int = 64                 # documents per burst
    questions_per_doc: int = 4     # reuse burst: 4 x 64 = 256 requests
    skewed_requests: int = 256
    filler_sentences: int = 50     # ~750-790 prompt tokens per request with the default model:
                                   # a retrieval-sized chunk (12 gave ~260, which hides costs
                                   # that grow with the prompt)
    null_questions: int = 20_000   # plumbing run (null engine); 0 skips it
    seed: int = 0


def burst_rows(burst: str, opts: BenchOptions, seed: int) -> list[dict]:
    kw = dict(filler_sentences=opts.filler_sentences, seed=seed, id_prefix=f"{burst}-")
    if burst == "no_reuse":
        return document_questions(opts.docs, 1, **kw)
    if burst == "reuse":
        # Shuffled, not strictly interleaved: with a strict interleave and an even number of
        # documents, round-robin over 2 shards sends every question of a document to the same
        # shard by parity alone, and "standalone-rr" would silently be prefix-affine.
        return document_questions(opts.docs, opts.questions_per_doc, order="shuffled", **kw)
    if burst == "skewed":
        counts = skewed_counts(opts.docs, opts.skewed_requests, seed=seed)
        return document_questions(opts.docs, counts, order="shuffled", **kw)
    raise ValueError(f"unknown burst {burst!r}; known: {', '.join(BURSTS)}")


@dataclass
class Prepared:
    """A burst's rows turned into prompts once, for every contender."""
    rows: list[dict]
    prefix_ids: list[list[int]]
    suffix_ids: list[list[int]]
    ideal_prefill: int         # a perfect prefix cache per shard: every distinct token prefix once
    ideal_prefill_blocks: int  # the same at the KV cache's block granularity
                               # (pipeline/bench/prefill_ideal.py)

    @classmethod
    def build(cls, rows, task, tokenizer, block_size: int = 1, shards: int = 1) -> "Prepared":
        cache: dict[str, list[int]] = {}
        prefixes, suffixes = [], []
        for row in rows:
            parts = task.split(row)
            if parts.prefix not in cache:
                cache[parts.prefix] = tokenizer.encode(parts.prefix, add_special_tokens=False)
            prefixes.append(cache[parts.prefix])
            suffixes.append(tokenizer.encode(parts.suffix, add_special_tokens=False))
        prompts = [a + b for a, b in zip(prefixes, suffixes)]
        return cls(rows, prefixes, suffixes, token_ideal(prompts, shards),
                   block_ideal(prompts, block_size, shards))


@dataclass
class RunResult:
    contender: str
    burst: str
    pair: int
    wall_s: float
    requests: int
    answered: int
    errors: int
    correct: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    ideal_prefill: int
    ideal_prefill_blocks: int
    per_shard: dict
    finish_s: dict
    gc: dict
    encoded_bytes: int | None = None
    raw_bytes: int | None = None
    cores: dict = field(default_factory=dict)          # role -> cores used during the burst (pipeline/bench/cpu_share.py)
    faults: dict = field(default_factory=dict)         # role -> minor page faults during the burst
    engine_idle_s: dict = field(default_factory=dict)  # pipeline: shard -> burst time its engine had no request

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.wall_s

    @property
    def output_tokens_per_s(self) -> float:
        return self.completion_tokens / self.wall_s

    @property
    def prefill_computed(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(requests_per_s=self.requests_per_s, output_tokens_per_s=self.output_tokens_per_s,
                 prefill_computed=self.prefill_computed)
        return d


def _correct(expected: str, answer: str | None) -> bool:
    return answer is not None and expected.lower() in answer.lower()


def run_standalone(name, shards, prep: Prepared, pipeline, burst, pair, roles=None) -> RunResult:
    """``pipeline`` given: split the prompts with the pipeline's own routing (a fresh router,
    same settings, same order of rows per shard); otherwise round-robin."""
    assign: dict[str, list[int]] = {s: [] for s in shards.shards}
    if pipeline is None:
        for i in range(len(prep.rows)):
            assign[shards.shards[i % len(shards.shards)]].append(i)
    else:
        assign.update(pipeline.static_assignment(prep.rows))
    shards.reset_cache()
    before = roles.snapshot() if roles else None
    wall, finish, outputs, gc = shards.run({k: [prep.prefix_ids[i] + prep.suffix_ids[i] for i in v]
                                            for k, v in assign.items()})
    res = RunResult(name, burst, pair, wall, len(prep.rows), 0, 0, 0, 0, 0, 0, prep.ideal_prefill,
                    prep.ideal_prefill_blocks, {k: len(v) for k, v in assign.items()}, finish, gc)
    if roles:
        after = roles.snapshot()
        res.cores, res.faults = cores_used(before, after, wall), minor_faults(before, after)
    for shard, idx in assign.items():
        for i, out in zip(idx, outputs[shard]):
            res.answered += 1
            res.correct += _correct(prep.rows[i]["expected"], out.text)
            res.prompt_tokens += out.prompt_tokens
            res.cached_tokens += out.cached_tokens
            res.completion_tokens += out.completion_tokens
    return res


def run_pipeline(pipeline, prep: Prepared, burst, pair, roles=None) -> RunResult:
    pipeline.reset_cache()
    res = RunResult("pipeline", burst, pair, 0.0, len(prep.rows), 0, 0, 0, 0, 0, 0, prep.ideal_prefill,
                    prep.ideal_prefill_blocks, {}, {}, {})
    busy0 = _engine_busy(pipeline)
    before = roles.snapshot() if roles else None
    t0 = time.perf_counter()
    for r in pipeline.stream(prep.rows):
        res.answered += 1
        res.errors += r.error is not None
        res.correct += _correct(prep.rows[r.index]["expected"], r.answer)
        res.prompt_tokens += r.prompt_tokens
        res.cached_tokens += r.cached_tokens
        res.completion_tokens += r.completion_tokens
        if r.shard is not None:
            res.per_shard[r.shard] = res.per_shard.get(r.shard, 0) + 1
            res.finish_s[r.shard] = time.perf_counter() - t0
    res.wall_s = time.perf_counter() - t0
    if roles:
        after = roles.snapshot()
        res.cores, res.faults = cores_used(before, after, res.wall_s), minor_faults(before, after)
    stats = pipeline.worker_stats()
    res.gc = {s["shard"]: s["gc"] for s in stats}
    res.engine_idle_s = {s["shard"]: res.wall_s - (s["metrics"]["engine_busy_s"] - busy0.get(s["shard"], 0.0))
                         for s in stats}
    res.encoded_bytes = pipeline.transfer.encoded_bytes
    res.raw_bytes = pipeline.transfer.raw_bytes
    return res


def _engine_busy(pipeline) -> dict[str, float]:
    return {s["shard"]: s["metrics"]["engine_busy_s"] for s in pipeline.worker_stats()}


def run_plumbing(config: Config, questions: int, seed: int = 0) -> dict:
    """Questions/s through routing, batching, compression, Dask and the result path,
    with an engine that answers at once."""
    from pipeline.client.pipeline import Pipeline

    rows = document_questions(max(1, questions // 4), 4, filler_sentences=12, seed=seed, order="interleaved")
    cfg = config.replace(scheduler={"dashboard_address": None})
    with Pipeline(cfg, engine="null") as p:
        p.run(rows[:200])  # warm
        p.reset_cache()
        t0 = time.perf_counter()
        n = sum(1 for _ in p.stream(rows))
        wall = time.perf_counter() - t0
        return {"questions": n, "wall_s": wall, "questions_per_s": n / wall,
                "encoded_bytes": p.transfer.encoded_bytes, "raw_bytes": p.transfer.raw_bytes,
                "batches": p.transfer.batches}


def _drive(pipeline, prep: Prepared) -> dict:
    """One pipeline run of ``prep``, summarized for the experiments."""
    r = run_pipeline(pipeline, prep, "experiment", 0)
    return {"requests": r.requests, "answered": r.answered - r.errors, "wall_s": r.wall_s,
            "requests_per_s": r.requests_per_s, "cached_share": r.cached_tokens / max(1, r.prompt_tokens),
            "prefill_over_ideal": r.prefill_computed / r.ideal_prefill,
            "prefill_over_block_ideal": r.prefill_computed / r.ideal_prefill_blocks,
            "encoded_over_raw": r.encoded_bytes / max(1, r.raw_bytes), "batches": pipeline.transfer.batches}


def run_grouping(config: Config, docs: int = 300, questions_per_doc: int = 3, kv_blocks: int = 96,
                 filler_sentences: int = 12, seed: int = 0) -> dict:
    """A big job in miniature: each document's rows scattered through the input, documents
    totalling several times the shards' KV cache. Cached share with and without grouping."""
    from pipeline.client.pipeline import Pipeline

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
            p.config = cfg.replace(routing={"group_by_prefix": grouped})
            out["grouped" if grouped else "arrival_order"] = _drive(p, prep)
    return out


def run_batch_sweep(pipeline, sizes=(8, 16, 32, 64, 128), opts: BenchOptions | None = None) -> list[dict]:
    """The reuse burst through the running pipeline at several batch sizes (client-side only)."""
    opts = opts or BenchOptions()
    base = pipeline.config
    prep = Prepared.build(burst_rows("reuse", opts, opts.seed + 7), pipeline.task, pipeline.tokenizer,
                          pipeline.router.block_size, len(base.shards))
    out = []
    try:
        for size in sizes:
            pipeline.config = base.replace(intake={"batch_size": size, "queue_per_shard": max(size, base.intake.queue_per_shard)})
            out.append({"batch_size": size, **_drive(pipeline, prep)})
    finally:
        pipeline.config = base
    return out


def summarize(results: list[RunResult]) -> dict:
    out: dict = {}
    for burst in dict.fromkeys(r.burst for r in results):
        rs = [r for r in results if r.burst == burst]
        per: dict = {}
        for c in dict.fromkeys(r.contender for r in rs):
            cr = [r for r in rs if r.contender == c]
            gc_max = max((g.get("max_ms", 0.0) for r in cr for g in r.gc.values()), default=0.0)
            gc_p99 = max((g.get("p99_ms", 0.0) for r in cr for g in r.gc.values()), default=0.0)
            gc_cpu = max((g.get("max_cpu_ms", 0.0) for r in cr for g in r.gc.values()), default=0.0)
            per[c] = {
                "requests_per_s": statistics.median(r.requests_per_s for r in cr),
                "output_tokens_per_s": statistics.median(r.output_tokens_per_s for r in cr),
                "runs_requests_per_s": [r.requests_per_s for r in cr],
                "prefill_over_ideal": statistics.median(r.prefill_computed / r.ideal_prefill for r in cr),
                "prefill_over_block_ideal": statistics.median(r.prefill_computed / r.ideal_prefill_blocks for r in cr),
                "cached_share": statistics.median(r.cached_tokens / max(1, r.prompt_tokens) for r in cr),
                "accuracy": sum(r.correct for r in cr) / sum(r.requests for r in cr),
                "answered_all": all(r.answered == r.requests and r.errors == 0 for r in cr),
                "gc_max_ms": gc_max, "gc_p99_ms": gc_p99, "gc_max_cpu_ms": gc_cpu,
                "finish_spread_s": statistics.median(
                    (max(r.finish_s.values()) - min(r.finish_s.values())) if r.finish_s else 0.0 for r in cr),
                "per_shard": cr[-1].per_shard,
                "cores": {role: statistics.median(r.cores.get(role, 0.0) for r in cr)
                          for role in sorted({k for r in cr for k in r.cores})},
                "prompt_tokens_per_request": statistics.median(r.prompt_tokens / r.requests for r in cr),
                # Minor page faults of the contender's vLLM processes per request: how often the
                # engines map fresh memory (the signature of glibc's trim threshold being set).
                "engine_faults_per_request": (statistics.median(
                    sum(n for role, n in r.faults.items() if role.endswith(" engine")) / r.requests for r in cr)
                    if all(r.faults for r in cr) else None),
                # The shard that finished last: its engine's idle time is the pipeline's own cost
                # (start, round trips, the result's way back); the other shards' extra idle is the
                # finish spread.
                "engine_idle_s": (statistics.median(min(r.engine_idle_s.values()) for r in cr)
                                  if all(r.engine_idle_s for r in cr) else None),
                "encoded_over_raw": (statistics.median(r.encoded_bytes / r.raw_bytes for r in cr)
                                     if cr[0].raw_bytes else None),
            }
        ratios = {}
        for ref in ("standalone-routed", "standalone-rr"):
            if "pipeline" in per and ref in per:
                pairs = {r.pair: r for r in rs if r.contender == ref}
                worst = min(r.requests_per_s / pairs[r.pair].requests_per_s
                            for r in rs if r.contender == "pipeline" and r.pair in pairs)
                ratios[f"pipeline/{ref}"] = {
                    "median": per["pipeline"]["requests_per_s"] / per[ref]["requests_per_s"], "worst_pair": worst}
        out[burst] = {"contenders": per, "ratios": ratios}
    return out


def run_bench(config: Config, opts: BenchOptions, *, pipeline=None, progress: bool | None = None) -> dict:
    """Run every contender on every burst; return the report (see pipeline/bench/report.py)."""
    from tqdm import tqdm

    from pipeline.client.pipeline import Pipeline
    from pipeline.bench.standalone import StandaloneShards

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
    # Throughput side by side: the pipeline fills its engines at once, as the reference does
    # (the first-answer ramp trades ~1.7 s of a burst for a first answer within ~2 s; README).
    pipeline.config = pipeline.config.replace(intake={"first_answer_rows": 0})
    try:
        engine_start = {s["shard"]: s["engine_start_s"] for s in pipeline.worker_stats()}
        with StandaloneShards(pipeline.config, pipeline.model, environ=user_env) as shards:
            roles = Roles(shards.pids)
            engine_envs = engine_env_report(pipeline, shards)
            results: list[RunResult] = []
            bs, n_shards = pipeline.router.block_size, len(pipeline.config.shards)
            warm = Prepared.build(burst_rows("reuse", BenchOptions(docs=4, questions_per_doc=2), 99),
                                  pipeline.task, pipeline.tokenizer, bs, n_shards)
            run_standalone("warm", shards, warm, None, "warm", -1)
            run_pipeline(pipeline, warm, "warm", -1)
            contenders = tuple(c for c in CONTENDERS if c in opts.contenders)
            total = len(opts.bursts) * opts.pairs * len(contenders)
            with tqdm(total=total, disable=not progress, unit="run", desc="bench") as bar:
                for b, burst in enumerate(opts.bursts):
                    for pair in range(opts.pairs):
                        prep = Prepared.build(burst_rows(burst, opts, opts.seed + 1000 * b + pair),
                                              pipeline.task, pipeline.tokenizer, bs, n_shards)
                        order = contenders if pair % 2 == 0 else tuple(reversed(contenders))
                        for c in order:
                            bar.set_description(f"{burst} pair {pair + 1}/{opts.pairs} {c}")
                            if c == "pipeline":
                                results.append(run_pipeline(pipeline, prep, burst, pair, roles))
                            else:
                                routed = pipeline if c == "standalone-routed" else None
                                results.append(run_standalone(c, shards, prep, routed, burst, pair, roles))
                            bar.update(1)
            standalone_start = dict(shards.start_s)
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
        "summary": summarize(results),
        "plumbing": plumbing,
        "runs": [x.as_dict() for x in results],
        "total_s": time.perf_counter() - started,
    }


# Variables that change how an engine runs, shown side by side in the report.
WATCHED_ENV = ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "PYTHONHASHSEED", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE", "VLLM_USE_AOT_COMPILE",
               "LD_PRELOAD")


def engine_env_report(pipeline, shards) -> dict:
    """Per shard and vLLM process (engine core, model runner): how the pipeline's engine
    environment differs from the plain-vLLM reference's, read from /proc/<pid>/environ
    (``PIPELINE_*`` left out), and the watched variables of each."""
    workers = {s["shard"]: s["pid"] for s in pipeline.worker_stats()}
    out: dict = {}
    for shard in shards.shards:
        sides = {}
        for side, root in (("pipeline", workers.get(shard)), ("standalone", shards.pid_of(shard))):
            procs = engine_env.engine_processes(root) if root else {}
            sides[side] = {}
            for pid, name in sorted(procs.items()):
                try:
                    sides[side].setdefault(name, (pid, engine_env.read_environ(pid)))
                except OSError:
                    continue
        per_proc = {}
        for name in sorted(set(sides["pipeline"]) | set(sides["standalone"])):
            (ppid, penv), (spid, senv) = sides["pipeline"].get(name, (None, {})), sides["standalone"].get(name, (None, {}))
            d = engine_env.env_diff(penv, senv)
            per_proc[name] = {"pipeline_pid": ppid, "standalone_pid": spid,
                              "only_pipeline": d["only_a"], "only_standalone": d["only_b"], "differ": d["differ"],
                              "watched": {k: [penv.get(k), senv.get(k)] for k in WATCHED_ENV}}
        out[shard] = per_proc
    return out


def machine_description() -> dict:
    import os
    import platform

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            mem_gib = round(int(next(ln for ln in f if ln.startswith("MemTotal")).split()[1]) / 2**20, 1)
    except (OSError, StopIteration):
        pass
    versions = {}
    for mod in ("vllm", "torch", "dask", "distributed"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - a missing package is just not reported
            pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem_gib, "python": platform.python_version(),
            "platform": platform.platform(), **versions}
