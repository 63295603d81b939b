"""Batch LLM inference on a Dask cluster. "run INPUT OUTPUT" answers every row of a file; "up",
"status" and "down" manage a resident local cluster that later runs with the same config use;
"serve" offers OpenAI's Files and Batches API over HTTP; "scheduler" and "worker" start one host
of a cluster across machines.

Exit codes: 0 done; 2 the job could not start and nothing ran; 1 the job stopped midway, and the
same command again resumes it from what was committed; 130 interrupted, likewise."""

from __future__ import annotations

import argparse
import sys
import warnings

from pipeline import console
from pipeline.cli import bench as bench_cli
from pipeline.cli import serve as service_command
from pipeline.console import EXIT_STOPPED, EXIT_USAGE
from tasks.registry import CONFIG_TASKS


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    _add_run_parser(sub)
    _add_cluster_parsers(sub)
    bench_cli.add_bench_parser(sub)
    service_command.add_serve_parser(sub)
    prep = sub.add_parser("prepare-model", help="convert the default model once into the cache folder")
    prep.add_argument("--config")
    check = sub.add_parser("check-config", help="validate a cluster.yaml and print it")
    check.add_argument("config", nargs="?")
    return p


def _add_run_parser(sub) -> None:
    run = sub.add_parser("run", help="answer every row of the input; write one output row per input row")
    run.add_argument(
        "input",
        help="Parquet file, folder of Parquet files, or glob (columns document, question, "
        "optional id); or an OpenAI batch .jsonl file",
    )
    run.add_argument(
        "output",
        help="output file (Parquet, or JSONL for OpenAI batch input); results so far are "
        "kept in OUTPUT.partial/ and running the same command again resumes",
    )
    run.add_argument("--config", help="cluster.yaml (default: the repository's)")
    run.add_argument(
        "--format",
        choices=("auto", "parquet", "openai"),
        default="auto",
        help="input format (auto: openai for .jsonl, else parquet)",
    )
    run.add_argument(
        "--allow-duplicate-ids",
        action="store_true",
        help="run even when some id (custom_id) is used by more than one row",
    )
    run.add_argument(
        "--truncate",
        action="store_true",
        help="cut prompts longer than the model's context (the end of the document) instead of "
        "answering them with an error",
    )
    run.add_argument(
        "--part-rows",
        type=int,
        default=10_000,
        help="rows per committed output part (default 10000); a part is also committed every 30 s",
    )
    run.add_argument(
        "--model",
        metavar="PATH",
        help="overrides the config's model.path: a model folder, a hub name, or a packaged model "
        "(all-MiniLM-L6-v2: an embedding model, for --task embed)",
    )
    run.add_argument(
        "--engine",
        choices=("vllm", "fake", "null"),
        help="overrides the config's engine.kind; for testing: 'fake' answers every row with an "
        "empty string (after engine.null_latency_s), no vLLM ('null': its old name)",
    )
    run.add_argument("--quiet", action="store_true", help="no progress bar or logs")
    run.add_argument(
        "--verbose",
        action="store_true",
        help="the workers' Dask and vLLM logs on this terminal (default: one log file per shard)",
    )
    _add_prompt_options(run.add_argument_group("prompt and sampling (override the config's prompt: and sampling:)"))


def _add_prompt_options(prompt) -> None:
    prompt.add_argument(
        "--task",
        choices=CONFIG_TASKS,
        help="document_question: columns document, question; generate: a prompt (optional prefix) "
        "or messages column; template: --template's columns; embed: a document column (or "
        "--template's), embedded by the embedding model in model.path; classify: --template's "
        "columns, weighed against --label's; score: columns document, query (or --template's), "
        "the probability of yes",
    )
    prompt.add_argument(
        "--template",
        metavar="TEXT",
        help="the user message, naming input columns, e.g. 'Summarize in one line: {text}' "
        "(sets --task template unless --task embed, classify or score); put what rows share first",
    )
    prompt.add_argument(
        "--prefix-column",
        metavar="COLUMN",
        help="the template's shareable prefix runs through this column (default: its first)",
    )
    prompt.add_argument("--system", metavar="TEXT", help="a system prompt")
    prompt.add_argument(
        "--json-schema",
        metavar="FILE_OR_JSON",
        help="answers are JSON matching this schema (a .json file or the schema's text); the "
        "output gets an answer_json column",
    )
    prompt.add_argument(
        "--choice",
        action="append",
        metavar="TEXT",
        help="the answer is exactly one of these (repeat: --choice yes --choice no)",
    )
    prompt.add_argument(
        "--label",
        action="append",
        metavar="TEXT",
        dest="labels",
        help="--task classify/score: a label to weigh (repeat: --label positive --label negative)",
    )
    prompt.add_argument("--max-tokens", type=int, help="tokens per answer at most")
    prompt.add_argument("--temperature", type=float)


def _add_cluster_parsers(sub) -> None:
    up = sub.add_parser(
        "up",
        help="start the local cluster in the background and keep its engines warm for later runs with the same config",
    )
    up.add_argument("--config", help="cluster.yaml (default: the repository's)")
    status = sub.add_parser(
        "status",
        help="the resident local cluster: shards, engines, requests served, "
        "prefix-cache use; and the batch service's batches",
    )
    status.add_argument("--config")
    status.add_argument("--json", action="store_true", help="print it as JSON (for scripts)")
    status.add_argument(
        "--store",
        metavar="DIR",
        help="the batch service's store whose batches are listed (default: serve's, model.cache_dir/service)",
    )
    down = sub.add_parser("down", help="stop the resident local cluster (engines first)")
    down.add_argument("--config")
    _add_host_parsers(sub)


def _add_host_parsers(sub) -> None:
    sched = sub.add_parser(
        "scheduler",
        help="run this host's Dask scheduler with the pipeline's settings (several machines: docs/operating.md)",
    )
    sched.add_argument("--host", help="the address to listen on (default: the config's scheduler.host, 127.0.0.1)")
    sched.add_argument("--port", type=int, help="default 8786")
    sched.add_argument("--dashboard-address", metavar="HOST:PORT", help="the dashboard (default: HOST:8787; none: off)")
    worker = sub.add_parser(
        "worker",
        help="run this host's Dask worker for one shard, rejoining its scheduler "
        "whenever it comes back (several machines: docs/operating.md)",
        usage="python -m pipeline worker [SCHEDULER_ADDRESS] --shard NAME|auto [options] [dask worker options]",
        description="SCHEDULER_ADDRESS: tcp://HOST:8786 (tls://... with TLS), the first argument; "
        "default: $DASK_SCHEDULER_ADDRESS. Options this command does not know (--name, "
        "--nthreads, --memory-limit, ...) are passed to dask worker.",
    )
    worker.add_argument(
        "--shard",
        required=True,
        metavar="NAME|auto",
        help="the entry of the config's shards: this worker serves; auto: the first one no worker "
        "serves, claimed at the scheduler",
    )
    worker.add_argument(
        "--host",
        help="the address to listen on, this host's on the network that reaches the scheduler "
        "(default: 127.0.0.1 when the scheduler is on this host)",
    )
    worker.add_argument(
        "--no-restart",
        dest="restart",
        action="store_false",
        help="end when the Dask worker ends instead of starting it again",
    )
    for p in (sched, worker):
        p.add_argument("--config", help="cluster.yaml (default: the repository's)")
        p.add_argument(
            "--insecure",
            action="store_true",
            help="allow an address beyond loopback without TLS (a network only you can reach)",
        )
        p.add_argument(
            "--log-file",
            metavar="PATH",
            help="Dask's and vLLM's output (default: model.cache_dir/logs/<scheduler|shard>.log; "
            "-: this terminal, e.g. for systemd's journal or kubectl logs)",
        )


def _config_command(args: argparse.Namespace, config) -> int:
    from pipeline.model import model_folder, resolve_model

    if args.command == "prepare-model":
        print(resolve_model(config))
        return 0
    from pipeline.config.layout import describe

    print(config.model_dump_json(indent=2))
    print(f"shards:\n{describe(config)}")
    config.require_layout(model_folder(config), local=not config.scheduler.address)
    return 0


def _host_command(args: argparse.Namespace, config) -> int:
    from pipeline.cluster import hosts

    if args.command == "scheduler":
        return hosts.run_scheduler(config, args.host, args.port, args.dashboard_address, args.insecure, args.log_file)
    return hosts.run_worker(
        config,
        args.scheduler_address,
        args.shard,
        args.host,
        args.insecure,
        args.log_file,
        args.dask_args,
        restart=args.restart,
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    """``worker`` keeps the options it does not know in ``args.dask_args``, for ``dask worker``."""
    parser = _parser()
    address = None
    if len(argv) > 1 and argv[0] == "worker" and not argv[1].startswith("-"):
        # Taken here, or argparse would give a passed-through option's value to this positional.
        address, argv = argv[1], [argv[0], *argv[2:]]
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "worker":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.scheduler_address = address
    args.dask_args = rest
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    # The project's modules are imported only when a command runs, so that `--help` and a bad
    # argument answer without loading Dask or torch.
    from pipeline.cluster.engines import EngineStartError
    from pipeline.config import ConfigError, ConfigNote, engine_kind, load_config
    from pipeline.data.errors import JobError
    from pipeline.model import ModelError

    try:
        # A deprecated spelling is noted once on this terminal; the workers get the new one.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConfigNote)
            config = load_config(args.config)
            if getattr(args, "engine", None):
                args.engine = engine_kind(args.engine)
        for note in dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, ConfigNote)):
            print(f"note: {note}", file=sys.stderr)
        for w in caught:
            if not issubclass(w.category, ConfigNote):
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        if args.command in ("check-config", "prepare-model"):
            return _config_command(args, config)
        if args.command in ("up", "status", "down"):
            from pipeline.cli import resident_commands as commands

            return (
                commands.status(config, args.json, args.store)
                if args.command == "status"
                else getattr(commands, args.command)(config)
            )
        if args.command in ("scheduler", "worker"):
            return _host_command(args, config)
        if args.command == "serve":
            return service_command.serve(args, config)
        if args.command == "bench":
            if not args.verbose:
                console.quiet_logs(workers=True)
            return bench_cli.bench(args, config)
        if not args.verbose:
            console.quiet_logs()
        from pipeline.cli import run as job_command

        return job_command.run(args, config)
    except (ConfigError, JobError, ModelError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except EngineStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_STOPPED
