"""File jobs: Parquet or OpenAI batch JSONL in, exactly one output row per input row out.

    from pipeline import Pipeline, run_job
    with Pipeline() as p:
        summary = run_job(p, "in/*.parquet", "answers.parquet", truncate=True)

``prepare_job`` does every check that needs no engine, so that a bad input fails before the cluster does any work."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa

from pipeline.config import Config, load_config
from pipeline.data.answer_files import RESULT_TYPES
from pipeline.data.cluster_parts import ClusterParts
from pipeline.data.errors import JobError
from pipeline.data.input import OpenAIBatchSource, ParquetSource, check_output_apart, open_source
from pipeline.data.job_folder import META
from pipeline.data.partitions import plan_blocks, plan_partitions
from pipeline.data.storage import filesystem, is_url, local_path
from pipeline.jobs.file_steps import FileJob, FileSteps
from pipeline.jobs.key_check import check_duplicates, check_key_type
from pipeline.jobs.openai_batch import ResponseLines
from pipeline.model import DEFAULT_MODEL_NAME, head_labels
from pipeline.results import RESULT_FIELDS, output_fields
from pipeline.summary import JobSummary
from tasks import task_columns

if TYPE_CHECKING:
    from pipeline.jobs.cluster_handle import ClusterHandle


__all__ = ["prepare_job", "run_job"]


def prepare_job(
    input_path: str | os.PathLike,
    output_path: str | os.PathLike,
    *,
    format: str = "auto",
    allow_duplicate_ids: bool = False,
    truncate: bool = False,
    part_rows: int = 10_000,
    flush_seconds: float = 30.0,
    notify: Callable[[str], None] | None = None,
    config: "Config | None" = None,
) -> FileJob:
    """Checks everything that needs no engine and returns the job, or raises ``JobError`` with the reason."""
    notify = notify or (lambda message: print(message, file=sys.stderr))
    config = config or load_config()
    source = _checked_source(input_path, output_path, format, config)
    notes = _input_notes(source, input_path)
    remote = is_url(output_path)
    final: str | Path = str(output_path) if remote else Path(local_path(output_path))
    partial = _partial_meta(final, config.storage_options)  # an earlier run's, if any
    if partial is not None and partial.get("path", "client") != "cluster":
        raise JobError(
            f"{final}.partial was left by an earlier version's client-side job, which this version no "
            f"longer runs; finish it with the version that started it, or delete it to start over"
        )
    meta, partitions = _meta_and_partitions(source, partial, config)
    # The workers check a larger job's keys so that the client does not hold them all.
    keys_on_workers = source.key is not None and not allow_duplicate_ids and len(partitions) > 1
    if not keys_on_workers:
        check_duplicates(source, allow_duplicate_ids)
    schema = _output_schema(source, config)
    sink = (
        ClusterParts.on_store(str(final), meta, schema, partitions, config.storage_options)
        if remote
        else ClusterParts.local(Path(final), meta, schema, partitions)
    )
    done = sink.open()
    notes += sink.notes  # damaged answer files that were dropped
    if done:
        of = f" of {meta['rows']}" if meta["rows"] is not None else ""
        notes.append(f"resuming: {done}{of} rows are already in {sink.dir}; answering the rest")
    for note in notes:  # only once every check has passed
        notify(note)
    lines = (
        ResponseLines(
            config.model.path or DEFAULT_MODEL_NAME, config.sampling.max_tokens, sink.meta["started"], source.endpoint
        )
        if isinstance(source, OpenAIBatchSource)
        else None
    )
    return FileJob(
        FileSteps(source, sink, check_keys=keys_on_workers, lines=lines), config, truncate, part_rows, flush_seconds
    )


def _checked_source(input_path, output_path, format: str, config: "Config") -> ParquetSource | OpenAIBatchSource:
    """Opens the input and checks what can be checked without reading every row."""
    source = open_source(
        input_path,
        format,
        task_columns(config, head_labels(config)),
        config.storage_options,
        config.model.adapters,
        config.engine.tool_call_parser,
    )
    if isinstance(source, OpenAIBatchSource):
        source.check_requests()
    check_output_apart(source, output_path, config.storage_options)  # before anything is written
    check_key_type(source)
    if isinstance(source, ParquetSource) and "adapter" in source.row_columns.sampling_columns and not config.lora_slots:
        raise JobError(
            f"input {input_path} has an adapter column, and this config's engines run without adapters; "
            f"list them in model.adapters (or set engine.max_loras) and start the cluster again"
        )
    return source


def _meta_and_partitions(source, partial: dict | None, config: "Config") -> tuple[dict[str, Any], list]:
    """The job's ``_job.json`` record and its partitions, cut as an earlier run cut them so that the run can resume."""
    jsonl = isinstance(source, OpenAIBatchSource)
    # Answers are matched to rows by position, so a changed input file must not resume.
    meta: dict[str, Any] = {
        "input": source.description,
        "format": source.format,
        "rows": None if jsonl else source.num_rows,  # the workers count a JSONL file's rows
        "key": source.key or "position",
        "started": int(time.time()),
        "path": "cluster",
        "files": _fingerprint(source.files, source.fs),
    }
    partitions: list
    if isinstance(source, OpenAIBatchSource):
        meta["partition_bytes"] = _resumed(partial, "partition_bytes") or config.jobs.partition_bytes
        partitions = plan_blocks(source.size, meta["partition_bytes"])
        if partial is not None and partial.get("files") == meta["files"]:  # counted by an earlier run
            meta["rows"] = _resumed(partial, "rows")
    else:
        meta["partition_rows"] = _resumed(partial, "partition_rows") or config.jobs.partition_rows
        partitions = plan_partitions(source.row_groups, meta["partition_rows"])
    return meta, partitions


def _input_notes(source, input_path) -> list[str]:
    notes = []
    if source.key is None:
        notes.append(
            f"note: {input_path} has no id column; each row is keyed by its position in the input "
            f"(files in name order, then row order), and the output's id column holds it. "
            f"Resuming an interrupted job therefore needs the same input, unchanged."
        )
    if source.dropped:
        notes.append(
            f"note: input column(s) {', '.join(source.dropped)} have the names of output columns "
            f"and are not copied to the output"
        )
    return notes


def _output_schema(source, config: "Config") -> pa.Schema:
    """The output parts' columns: the input's own, then the results the job asks for."""
    jsonl = source.format == "openai"  # its lines may ask for any result column
    fields = (
        list(RESULT_FIELDS[1:])
        if jsonl
        else output_fields(config.sampling.as_sampling(0), source.row_columns.sampling_columns, config.task)
    )
    if jsonl:
        return pa.schema([pa.field("id", pa.string()), *(pa.field(n, RESULT_TYPES[n]) for n in fields)])
    return pa.schema(
        [
            *(source.schema.field(n) for n in source.passthrough),
            pa.field("id", source.key_type),
            *(pa.field(n, RESULT_TYPES[n]) for n in fields),
        ]
    )


def run_job(
    pipeline: ClusterHandle,
    input_path,
    output_path,
    *,
    progress: bool | None = None,
    task: str | None = None,
    prompt: dict | None = None,
    sampling: dict | None = None,
    **options,
) -> JobSummary:
    """Runs a whole file job from Python as ``python -m pipeline run`` does; ``task``, ``prompt`` and ``sampling``
    apply to this job only."""
    config = pipeline.config.for_job(task, prompt, sampling)
    return prepare_job(input_path, output_path, config=config, **options).run(pipeline, progress=progress)


def _fingerprint(files: list[str], fs=None) -> list[list]:
    """Each input file's size and change stamp, so that a rerun can tell whether the input changed."""
    out = []
    for f in files:
        if fs is not None:
            info = fs.info(f)
            stamp = next(
                (
                    info[k]
                    for k in ("ETag", "etag", "LastModified", "mtime", "updated", "created")
                    if info.get(k) is not None
                ),
                "",
            )
            out.append([info.get("size"), str(stamp)])
            continue
        st = os.stat(f)
        out.append([st.st_size, st.st_mtime_ns])
    return out


def _partial_meta(final, storage_options: dict | None = None) -> dict | None:
    """The ``_job.json`` of OUTPUT.partial, if any; a client-path job's manifest holds it under ``meta``."""
    try:
        if is_url(str(final)):
            fs, path = filesystem(str(final), storage_options)
            meta = json.loads(fs.cat_file(f"{path}.partial/{META}"))
            if isinstance(meta, dict) and "parts" in meta:
                meta = meta.get("meta")
        else:
            meta = json.loads((Path(str(final) + ".partial") / META).read_text())
    except Exception:  # noqa: BLE001 - none, or unreadable: opening the output says why
        return None
    return meta if isinstance(meta, dict) else None


def _resumed(partial: dict | None, setting: str):
    """A partition setting of an earlier cluster run, which a rerun must reuse so that the partitions match."""
    return partial.get(setting) if partial is not None and partial.get("path") == "cluster" else None
