"""Command line: ``python -m pipeline run INPUT OUTPUT [--config cluster.yaml] [options]``;
``python -m pipeline up`` / ``status`` / ``down`` for a resident local cluster that every
later ``run`` with the same config uses.

Exit codes: 0 done; 2 the job cannot start (bad input, output, config or model: nothing
ran); 1 the job stopped midway (what was committed is kept: run the same command again to
resume); 130 interrupted (likewise)."""
from __future__ import annotations

import argparse
import sys
import time

from pipeline import console
from pipeline.bench import cli as bench_cli

EXIT_USAGE = 2
EXIT_STOPPED = 1
EXIT_INTERRUPTED = 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="answer every row of the input; write one output row per input row")
    run.add_argument("input", help="Parquet file, folder of Parquet files, or glob (columns document, question, "
                                   "optional id); or an OpenAI batch .jsonl file")
    run.add_argument("output", help="output file (Parquet, or JSONL for OpenAI batch input); results so far are "
                                    "kept in OUTPUT.partial/ and running the same command again resumes")
    run.add_argument("--config", default=None, help="cluster.yaml (default: the repository's)")
    run.add_argument("--format", choices=("auto", "parquet", "openai"), default="auto",
                     help="input format (auto: openai for .jsonl, else parquet)")
    run.add_argument("--allow-duplicate-ids", action="store_true",
                     help="run even when some id (custom_id) is used by more than one row")
    run.add_argument("--truncate", action="store_true",
                     help="cut prompts longer than the model's context (the end of the document) instead of "
                          "answering them with an error")
    run.add_argument("--part-rows", type=int, default=10_000,
                     help="rows per committed output part (default 10000); a part is also committed every 30 s")
    run.add_argument("--engine", choices=("vllm", "null"), default=None,
                     help="overrides the config's engine.kind; for testing: 'null' answers every row with an "
                          "empty string (after engine.null_latency_s), no vLLM")
    run.add_argument("--quiet", action="store_true", help="no progress bar or logs")
    run.add_argument("--verbose", action="store_true",
                     help="the workers' Dask and vLLM logs on this terminal (default: one log file per shard)")
    prompt = run.add_argument_group("prompt and sampling (override the config's prompt: and sampling:)")
    prompt.add_argument("--task", choices=("document_question", "template", "generate"), default=None,
                        help="document_question: columns document, question; generate: a prompt (optional prefix) "
                             "or messages column; template: --template's columns")
    prompt.add_argument("--template", default=None, metavar="TEXT",
                        help="the user message, naming input columns, e.g. 'Summarize in one line: {text}' (sets --task "
                             "template); put what rows share first")
    prompt.add_argument("--prefix-column", default=None, metavar="COLUMN",
                        help="the template's shareable prefix runs through this column (default: its first)")
    prompt.add_argument("--system", default=None, metavar="TEXT", help="a system prompt")
    prompt.add_argument("--json-schema", default=None, metavar="FILE_OR_JSON",
                        help="answers are JSON matching this schema (a .json file or the schema's text); the "
                             "output gets an answer_json column")
    prompt.add_argument("--choice", action="append", default=None, metavar="TEXT",
                        help="the answer is exactly one of these (repeat: --choice yes --choice no)")
    prompt.add_argument("--max-tokens", type=int, default=None, help="tokens per answer at most")
    prompt.add_argument("--temperature", type=float, default=None)
    up = sub.add_parser("up", help="start the local cluster in the background and keep its engines warm for later "
                                   "runs with the same config")
    up.add_argument("--config", default=None, help="cluster.yaml (default: the repository's)")
    status = sub.add_parser("status", help="the resident local cluster: shards, engines, requests served, "
                                           "prefix-cache use")
    status.add_argument("--config", default=None)
    status.add_argument("--json", action="store_true", help="print it as JSON (for scripts)")
    down = sub.add_parser("down", help="stop the resident local cluster (engines first)")
    down.add_argument("--config", default=None)
    bench_cli.add_bench_parser(sub)
    prep = sub.add_parser("prepare-model", help="convert the default model once into the cache folder")
    prep.add_argument("--config", default=None)
    bench_cli.add_router_bench_parser(sub)
    check = sub.add_parser("check-config", help="validate a cluster.yaml and print it")
    check.add_argument("config", nargs="?", default=None)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    if args.command == "router-bench":   # no config, no cluster
        return bench_cli.router_bench(args)
    from pipeline.cluster.engines import EngineStartError
    from pipeline.config import ConfigError, load_config
    from pipeline.jobs.errors import JobError
    from pipeline.model import ModelError

    try:
        config = load_config(args.config)
        if args.command == "check-config":
            from pipeline.cluster.layout import describe
            from pipeline.model import model_folder

            print(config.model_dump_json(indent=2))
            print(f"shards:\n{describe(config)}")
            config.require_layout(model_folder(config), local=not config.scheduler.address)
            return 0
        if args.command == "prepare-model":
            from pipeline.model import resolve_model

            print(resolve_model(config))
            return 0
        if args.command in ("up", "status", "down"):
            from pipeline.cluster import commands

            return commands.status(config, args.json) if args.command == "status" else \
                getattr(commands, args.command)(config)
        if args.command == "bench":
            if not args.verbose:
                console.quiet_logs(workers=True)
            return bench_cli.bench(args, config)
        if not args.verbose:
            console.quiet_logs()
        return _run(args, config)
    except (ConfigError, JobError, ModelError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except EngineStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_STOPPED


def _prompt_options(args, config):
    """The config with the command line's prompt and sampling options applied."""
    prompt = {k: v for k, v in (("system", args.system), ("template", args.template),
                                ("prefix_column", args.prefix_column)) if v is not None}
    sampling = {k: v for k, v in (("json_schema", args.json_schema), ("choice", args.choice),
                                  ("max_tokens", args.max_tokens), ("temperature", args.temperature)) if v is not None}
    if "json_schema" in sampling or "choice" in sampling:   # one constraint: the command line's
        sampling = {"json_schema": None, "choice": None, **sampling}
    task = args.task or ("template" if args.template is not None else None)
    if not (prompt or sampling or task):
        return config
    return config.replace(**({"task": task} if task else {}), prompt=prompt, sampling=sampling)


def _run(args, config) -> int:
    from pipeline.client.pipeline import Pipeline
    from pipeline.cluster import resident
    from pipeline.cluster.engines import EngineStartError
    from pipeline.cluster.resident_state import STATE_FILE, cluster_dir
    from pipeline.jobs.errors import JobError
    from pipeline.jobs.job import prepare_job
    from pipeline.model import model_for, resolve_model

    if args.part_rows < 1:
        raise JobError(f"--part-rows must be at least 1 (got {args.part_rows})")
    if args.engine:
        config = config.replace(engine={"kind": args.engine})
    config = _prompt_options(args, config)
    notify = (lambda line: None) if args.quiet else console.notify
    if not config.scheduler.address and (cluster_dir(config) / STATE_FILE).exists():
        # A resident cluster for another config is an error before anything is written.
        resident.find(config, model_for(config, config.engine.kind), notify)
    # Fail fast, before any engine starts: input, duplicate ids, output, resume state, model.
    notes: list[str] = []
    job = prepare_job(args.input, args.output, format=args.format, allow_duplicate_ids=args.allow_duplicate_ids,
                      truncate=args.truncate, part_rows=args.part_rows, notify=notes.append, config=config)
    if config.engine.kind == "vllm" or config.model.path is not None:
        resolve_model(config)
    for note in notes:
        print(note, file=sys.stderr)
    t0 = time.perf_counter()
    try:
        with Pipeline(config, verbose=args.verbose, notify=notify,
                      live=None if args.quiet else console.live_line()) as pipeline:
            if pipeline.resident is None:
                notify(f"cluster up in {time.perf_counter() - t0:.1f} s; dashboard: {pipeline.dashboard_link}")
            summary = job.run(pipeline, progress=None if not args.quiet else False)
    except (JobError, EngineStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    except KeyboardInterrupt:
        print(f"interrupted: {job.done} rows are committed in {job.sink.dir}; "
              f"run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # e.g. the cluster lost a worker: say so in one paragraph, keep what is committed
        print(f"error: the job stopped: {type(exc).__name__}: {exc}. {job.done} rows are committed in "
              f"{job.sink.dir}; run the same command again to resume (--verbose shows the traceback)",
              file=sys.stderr)
        if args.verbose:
            raise
        return EXIT_STOPPED
    print(summary.render())
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
