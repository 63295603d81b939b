#!/usr/bin/env python
"""The benchmark's noise floor: plain vLLM against itself. Starts two sets of standalone
engines (pipeline/bench/standalone.py, each from the user's clean environment, as the bench's
reference is), feeds both the same bench bursts split as the bench's ``standalone-routed``
contender splits them, alternating which set goes first, and prints each pair's wall times and
their ratio. A pipeline / plain vLLM ratio of one pair is no finer than the spread of these.

    .venv/bin/python scripts/plain_vs_plain.py [--burst skewed] [--seeds 3] [--reps 2] [--config FILE]
        [--split standalone-routed|standalone-sorted|standalone-arrival] [--b-engine KEY=VALUE ...]
        [--bigjob-docs 480]

Burst seeds 0, 1, ...: the bench's pairs of its first burst. Takes the real engine (compiled),
two engines per set, and a started pipeline for the tokenizer and the routing (its engines
stay idle). ``--b-engine max_num_seqs=256``: set B's engines run with that ``engine:`` setting
instead (an engine setting against plain vLLM itself, the same rows in the same order).
"""

from __future__ import annotations

import argparse
import statistics

import yaml

from pipeline import engine_env
from pipeline.bench.contenders import Prepared, run_standalone
from pipeline.bench.options import BenchOptions, burst_rows
from pipeline.bench.standalone import StandaloneShards
from pipeline.client.pipeline import Pipeline
from pipeline.config import load_config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--burst", default="skewed")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--config", default=None)
    ap.add_argument(
        "--split", default="standalone-routed", help="how the rows are split and ordered: a standalone bench contender"
    )
    ap.add_argument(
        "--b-engine",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an engine setting for set B only (YAML value), e.g. max_num_seqs=256",
    )
    ap.add_argument("--bigjob-docs", type=int, default=480)
    args = ap.parse_args()
    user_env = engine_env.process_environ()  # before the pipeline's nannies write into it
    config = load_config(args.config).replace(engine={"enforce_eager": False})
    b_engine = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.b_engine)}
    opts = BenchOptions(bigjob_docs=args.bigjob_docs)
    ratios = []
    with Pipeline(config) as p:
        bs, n = p.block_size, len(p.config.shards)
        with (
            StandaloneShards(p.config, p.model, environ=user_env) as a,
            StandaloneShards(p.config.replace(engine=b_engine), p.model, environ=user_env) as b,
        ):
            sets = {"A": a, "B": b}
            for k, s in sets.items():
                print(
                    f"set {k}'s engines: "
                    + "; ".join(f"{shard}: {settings}" for shard, settings in s.settings.items()),
                    flush=True,
                )
            warm = Prepared.build(
                burst_rows("reuse", BenchOptions(docs=4, questions_per_doc=2), 99), p.task, p.tokenizer, bs, n
            )
            for s in sets.values():
                run_standalone("standalone-rr", s, warm, None, "warm", -1)
            for rep in range(args.reps):
                for seed in range(args.seeds):
                    prep = Prepared.build(burst_rows(args.burst, opts, seed), p.task, p.tokenizer, bs, n)
                    wall = {}
                    for k in "AB" if (seed + rep) % 2 == 0 else "BA":
                        wall[k] = run_standalone(args.split, sets[k], prep, p, args.burst, seed).wall_s
                    ratios.append(wall["A"] / wall["B"])
                    print(
                        f"rep {rep} seed {seed}: A {wall['A']:.2f} s, B {wall['B']:.2f} s, "
                        f"B's req/s / A's {ratios[-1]:.3f}",
                        flush=True,
                    )
    if b_engine:
        print(f"set B's engine settings: {b_engine}")
    print(
        f"{len(ratios)} pairs: B's req/s / A's, median {statistics.median(ratios):.3f}, "
        f"{min(ratios):.3f}-{max(ratios):.3f}"
    )


if __name__ == "__main__":
    main()
