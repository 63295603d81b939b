"""``python -m pipeline bench``. Every command imports this module, so the benchmark's own modules,
which load Dask and vLLM, are imported only when ``bench`` runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_bench_parser(sub) -> None:
    bench = sub.add_parser("bench", help="the pipeline side by side with standalone vLLM, in one run")
    bench.add_argument("--config")
    bench.add_argument("--pairs", type=int, default=5, help="rounds per burst (default 5)")
    bench.add_argument(
        "--bursts",
        default="no_reuse,reuse,skewed",
        help="comma-separated: no_reuse, reuse, skewed, bigjob, completions (default: the first three)",
    )
    bench.add_argument("--documents", type=int, default=64, help="documents per burst (default 64)")
    bench.add_argument("--questions-per-doc", type=int, default=4, help="reuse and completions bursts (default 4)")
    bench.add_argument("--skewed-requests", type=int, default=256)
    bench.add_argument("--bigjob-docs", type=int, default=480, help="bigjob burst: documents (default 480)")
    bench.add_argument(
        "--bigjob-questions", type=int, default=3, help="bigjob burst: questions per document (default 3)"
    )
    bench.add_argument(
        "--filler-sentences",
        type=int,
        default=50,
        help="document size: about 13 tokens each (default 50: prompts of ~750-790 tokens)",
    )
    bench.add_argument(
        "--contenders",
        help="comma-separated subset of standalone-rr, standalone-routed, standalone-arrival, "
        "standalone-sorted, pipeline (default: standalone-rr,standalone-routed,pipeline)",
    )
    bench.add_argument(
        "--engine-mode",
        choices=("config", "eager", "compiled"),
        default="config",
        help="eager or compiled engines for both contenders (default: as the config says)",
    )
    bench.add_argument(
        "--engine-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="add a variable to every shard's environment, for both contenders' engines "
        "(e.g. MALLOC_TRIM_THRESHOLD_=65536 to see what it costs); repeatable",
    )
    bench.add_argument("--null-questions", type=int, default=20_000, help="plumbing run size; 0 skips it")
    bench.add_argument("--out", default="bench-out", help="folder for bench.json, BENCHMARKS.md, bench.png")
    bench.add_argument(
        "--write-docs",
        action="store_true",
        help="also write the last run's section of docs/BENCHMARKS.md, and docs/bench.png",
    )
    bench.add_argument("--quiet", action="store_true")
    bench.add_argument("--verbose", action="store_true")


def bench(args: argparse.Namespace, config) -> int:
    """Run the contenders with ``config``; raises ConfigError for options that do not fit it."""
    import shutil

    from pipeline.bench.options import ALL_CONTENDERS, KNOWN_BURSTS, BenchOptions
    from pipeline.bench.report import write_report
    from pipeline.bench.run import run_bench
    from pipeline.config import ConfigError

    opts = BenchOptions(
        pairs=args.pairs,
        bursts=tuple(b for b in args.bursts.split(",") if b),
        docs=args.documents,
        questions_per_doc=args.questions_per_doc,
        skewed_requests=args.skewed_requests,
        bigjob_docs=args.bigjob_docs,
        bigjob_questions=args.bigjob_questions,
        filler_sentences=args.filler_sentences,
        null_questions=args.null_questions,
    )
    if args.contenders is not None:
        opts.contenders = tuple(c for c in args.contenders.split(",") if c)
    command = "python -m pipeline " + " ".join(sys.argv[1:] if sys.argv[0].endswith("__main__.py") else ["bench"])
    config = bench_config(config, args.engine_mode, args.engine_env)
    if not set(opts.contenders) <= set(ALL_CONTENDERS) or "pipeline" not in opts.contenders:
        raise ConfigError(
            f"--contenders {args.contenders!r}: a subset of {', '.join(ALL_CONTENDERS)} that includes pipeline"
        )
    if not opts.bursts or not set(opts.bursts) <= set(KNOWN_BURSTS):
        raise ConfigError(f"--bursts {args.bursts!r}: a subset of {', '.join(KNOWN_BURSTS)}")
    report = run_bench(config, opts, progress=None if not args.quiet else False)
    paths = write_report(report, Path(args.out), command)
    print(paths["markdown"].read_text())
    if args.write_docs:  # (the part of docs/BENCHMARKS.md the bench owns, and its chart)
        from pipeline.bench.report import write_docs_section

        docs = Path(__file__).resolve().parents[2] / "docs"  # the repository's docs/
        docs.mkdir(exist_ok=True)
        write_docs_section(paths["markdown"].read_text(), docs / "BENCHMARKS.md")
        shutil.copy(paths["chart"], docs / "bench.png")
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def bench_config(config, mode: str, env_items: list[str]):
    from pipeline.config import ConfigError  # here, not at the top, for the other commands' start

    if mode != "config":
        config = config.replace(engine={"enforce_eager": mode == "eager"})
    if env_items:
        extra = {}
        for item in env_items:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ConfigError(f"--engine-env {item!r}: expected KEY=VALUE")
            extra[key] = value
        config = config.replace(shards=[{**s.model_dump(), "env": {**s.env, **extra}} for s in config.shards])
    return config
