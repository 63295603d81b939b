"""The bench's summary: per burst and contender, the medians over the pairs of runs
(``RunResult``s of pipeline/bench/contenders.py), and the pipeline's ratios to each standalone
reference."""

from __future__ import annotations

import statistics

from pipeline.bench.contenders import RunResult


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
                "gc_max_ms": gc_max,
                "gc_p99_ms": gc_p99,
                "gc_max_cpu_ms": gc_cpu,
                # (none for a file job: its rows come back in the output file, not as they finish)
                "finish_spread_s": (
                    statistics.median(max(r.finish_s.values()) - min(r.finish_s.values()) for r in cr)
                    if all(r.finish_s for r in cr)
                    else None
                ),
                "per_shard": cr[-1].per_shard,
                "cores": {
                    role: statistics.median(r.cores.get(role, 0.0) for r in cr)
                    for role in sorted({k for r in cr for k in r.cores})
                },
                "prompt_tokens_per_request": statistics.median(r.prompt_tokens / r.requests for r in cr),
                # Minor page faults of the contender's vLLM processes per request: how often the
                # engines map fresh memory (the signature of glibc's trim threshold being set).
                "engine_faults_per_request": (
                    statistics.median(
                        sum(n for role, n in r.faults.items() if role.endswith(" engine")) / r.requests for r in cr
                    )
                    if all(r.faults for r in cr)
                    else None
                ),
                # The shard that finished last: its engine's idle time is the pipeline's own cost
                # (start, round trips, the result's way back); the other shards' extra idle is the
                # finish spread.
                "engine_idle_s": (
                    statistics.median(min(r.engine_idle_s.values()) for r in cr)
                    if all(r.engine_idle_s for r in cr)
                    else None
                ),
            }
        ratios = {}
        for ref in ("standalone-routed", "standalone-rr", "standalone-arrival", "standalone-sorted"):
            if "pipeline" in per and ref in per:
                pairs = {r.pair: r for r in rs if r.contender == ref}
                worst = min(
                    r.requests_per_s / pairs[r.pair].requests_per_s
                    for r in rs
                    if r.contender == "pipeline" and r.pair in pairs
                )
                ratios[f"pipeline/{ref}"] = {
                    "median": per["pipeline"]["requests_per_s"] / per[ref]["requests_per_s"],
                    "worst_pair": worst,
                }
        out[burst] = {"contenders": per, "ratios": ratios}
    return out
