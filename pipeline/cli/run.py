"""``python -m pipeline run INPUT OUTPUT``: a file job from the command line, as the user sees it."""

from __future__ import annotations

import sys
import time

from pipeline import console
from pipeline.client.pipeline import Pipeline
from pipeline.client.tokenizer import load_tokenizer
from pipeline.cluster import resident
from pipeline.cluster.engines import EngineStartError
from pipeline.cluster.resident_state import STATE_FILE, cluster_dir
from pipeline.config import Config
from pipeline.console import EXIT_INTERRUPTED, EXIT_STOPPED
from pipeline.data.errors import JobError
from pipeline.jobs.job import prepare_job
from pipeline.model import DEFAULT_MODEL_NAME, head_labels, model_for, packaged_task, resolve_model
from tasks import TASKS, TemplateError, get_task_kind
from tasks.registry import unserved


def _given(args, names: tuple[str, ...]) -> dict:
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def prompt_options(args, config: Config) -> Config:
    prompt = _given(args, ("system", "template", "prefix_column", "labels"))
    sampling = _given(args, ("json_schema", "choice", "max_tokens", "temperature"))
    if "json_schema" in sampling or "choice" in sampling:  # one constraint: the command line's
        sampling = {"json_schema": None, "choice": None, **sampling}
    task = args.task or ("template" if args.template is not None else "classify" if args.labels else None)
    if not (prompt or sampling or task):
        return config
    return config.replace(**({"task": task} if task else {}), prompt=prompt, sampling=sampling)


def _check_model(job, config: Config) -> None:
    """Raise JobError where the model cannot run the job, before any engine starts."""
    served = packaged_task(config) if config.engine.kind == "vllm" else None
    refused = (
        unserved(job.steps.task_name(config), {served}, config.model.path or DEFAULT_MODEL_NAME) if served else None
    )
    if refused:
        raise JobError(refused)
    if config.engine.kind == "vllm" or config.model.path is not None:
        resolve_model(config)
    if TASKS[job.steps.task_name(config)].reads_labels:
        try:
            get_task_kind(config, load_tokenizer(model_for(config, config.engine.kind)), head_labels(config))
        except TemplateError as exc:
            raise JobError(str(exc)) from None


def run(args, config: Config) -> int:
    if args.part_rows < 1:
        raise JobError(f"--part-rows must be at least 1 (got {args.part_rows})")
    if args.engine:
        config = config.replace(engine={"kind": args.engine})
    if args.model:
        config = config.replace(model={"path": args.model})
    config = prompt_options(args, config)
    notify = (lambda line: None) if args.quiet else console.notify
    if not config.scheduler.address and (cluster_dir(config) / STATE_FILE).exists():
        # Refuse a resident cluster for another config before anything is written.
        resident.find(config, model_for(config, config.engine.kind), notify)
    # Fail fast, before any engine starts: input, duplicate ids, output, resume state, model.
    notes: list[str] = []
    job = prepare_job(
        args.input,
        args.output,
        format=args.format,
        allow_duplicate_ids=args.allow_duplicate_ids,
        truncate=args.truncate,
        part_rows=args.part_rows,
        notify=notes.append,
        config=config,
    )
    _check_model(job, config)
    for note in notes:
        print(note, file=sys.stderr)
    t0 = time.perf_counter()
    try:
        with Pipeline(
            config, verbose=args.verbose, notify=notify, live=None if args.quiet else console.live_line()
        ) as pipeline:
            if pipeline.resident is None:
                notify(f"cluster up in {time.perf_counter() - t0:.1f} s; dashboard: {pipeline.dashboard_link or 'off'}")
            summary = job.run(pipeline, progress=None if not args.quiet else False)
    except (JobError, EngineStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    except KeyboardInterrupt:
        print(
            f"interrupted: {job.done} rows are committed in {job.sink.dir}; run the same command again to resume",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except Exception as exc:  # e.g. the cluster lost a worker: say so in one paragraph, keep what is committed
        print(
            f"error: the job stopped: {type(exc).__name__}: {exc}. {job.done} rows are committed in "
            f"{job.sink.dir}; run the same command again to resume (--verbose shows the traceback)",
            file=sys.stderr,
        )
        if args.verbose:
            raise
        return EXIT_STOPPED
    print(summary.render())
    print(f"wrote {args.output}")
    return 0
