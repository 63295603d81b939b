"""Jobs: Parquet (or OpenAI batch JSONL) in, exactly one output row per input row out.

    from pipeline import Pipeline, run_job
    with Pipeline() as p:
        summary = run_job(p, "in/*.parquet", "answers.parquet", truncate=True)

``prepare_job`` does every check that needs no engine (input readable, columns, duplicate
ids, output writable and apart from the input, resume state; the ids of a cluster job larger than one partition are
checked by the workers, before any row is answered: pipeline/jobs/key_check.py) and says where the job runs (``jobs.path``): a Parquet job
(its input and output local, shared or on an object store) runs on the cluster
(``ClusterJob``, ``pipeline/jobs/cluster_job.py``: the workers read, group by document, answer
and write); any other job's ``Job.run`` streams the rows through this process and commits
results in input order as they complete (``pipeline/jobs/output.py``; on an object store
``pipeline/jobs/store_output.py``). Input and output are local paths or fsspec URLs
(``pipeline/jobs/storage.py``).

Parquet output columns: the input's own columns (except those the task reads, ``document``
and ``question`` for the default task, and those named like output columns) followed by ``id,
answer, error, prompt_tokens, cached_tokens, completion_tokens, shard, latency_s,
finish_reason`` and, for a job that asks for JSON answers, ``answer_json``
(``pipeline.results.RESULT_FIELDS``). OpenAI batch output: one response line per request
(``pipeline/jobs/openai_batch.py``).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import pyarrow as pa

from pipeline.client.in_order import InOrder
from pipeline.jobs.errors import JobError
from pipeline.jobs.input import Chunk, check_output_apart, open_source
from pipeline.jobs.key_check import check_duplicates, check_key_type
from pipeline.jobs.answer_files import RESULT_TYPES, ClusterParts
from pipeline.jobs.cluster_job import ClusterJob, FileSteps
from pipeline.jobs.output import META, JsonlLines, ParquetParts
from pipeline.jobs.partitions import plan_blocks, plan_partitions
from pipeline.jobs.storage import filesystem, is_url, local_path
from pipeline.jobs.store_output import StoreParts
from pipeline.jobs.openai_batch import ResponseLines, output_line
from pipeline.config import Config, load_config
from pipeline.model import DEFAULT_MODEL_NAME
from pipeline.results import JSON_FIELD, RESULT_FIELDS, ErrorKind, RowResult
from pipeline.summary import JobSummary
from tasks import Chat, get_task_kind, task_columns

if TYPE_CHECKING:
    from pipeline.client.pipeline import Pipeline


__all__ = ["Job", "prepare_job", "run_job"]


def prepare_job(input_path: str | os.PathLike, output_path: str | os.PathLike, *, format: str = "auto",
                allow_duplicate_ids: bool = False, truncate: bool = False, part_rows: int = 10_000,
                flush_seconds: float = 30.0, read_rows: int = 1024,
                notify: Callable[[str], None] | None = None, config: "Config | None" = None) -> "Job":
    """Check everything that needs no engine; raise :class:`JobError` with the reason.
    ``config``: the one the pipeline runs with (its task says which columns the input needs;
    default: the repository's cluster.yaml)."""
    notify = notify or (lambda message: print(message, file=sys.stderr))
    config = config or load_config()
    source = open_source(input_path, format, task_columns(config), config.storage_options)
    check_output_apart(source, output_path, config.storage_options)   # before anything is written
    check_key_type(source)
    notes = []
    if source.key is None:
        notes.append(f"note: {input_path} has no id column; each row is keyed by its position in the input "
               f"(files in name order, then row order), and the output's id column holds it. "
               f"Resuming an interrupted job therefore needs the same input, unchanged.")
    if source.dropped:
        notes.append(f"note: input column(s) {', '.join(source.dropped)} have the names of output columns "
               f"and are not copied to the output")
    remote = is_url(output_path)
    final = str(output_path) if remote else Path(local_path(output_path))
    partial = _partial_meta(final, config.storage_options)   # an earlier run's, if any (read once)
    on_cluster = _on_cluster(config, partial)
    jsonl = source.format == "openai"
    meta = {"input": source.description, "format": source.format,
            "rows": None if jsonl and on_cluster else source.num_rows,   # (a cluster job's JSONL: not read here)
            "key": source.key or "position", "started": int(time.time())}
    partitions = None
    if on_cluster:
        # the files as they are: answers are matched to rows by position, so a changed file
        # must not resume
        meta.update(path="cluster", files=_fingerprint(source.files, source.fs))
        if jsonl:
            meta["partition_bytes"] = _resumed(partial, "partition_bytes") or config.jobs.partition_bytes
            partitions = plan_blocks(source.size, meta["partition_bytes"])
            if partial is not None and partial.get("files") == meta["files"]:   # counted by an earlier run
                meta["rows"] = _resumed(partial, "rows")
        else:
            meta["partition_rows"] = _resumed(partial, "partition_rows") or config.jobs.partition_rows
            partitions = plan_partitions(source.row_groups, meta["partition_rows"])
    # the workers check the keys of a cluster job larger than a partition (the client would hold
    # 8 bytes a row); any other job's are checked here, before anything starts
    keys_on_workers = on_cluster and source.key is not None and not allow_duplicate_ids and len(partitions) > 1
    if not keys_on_workers:
        check_duplicates(source, allow_duplicate_ids)
    # answer_json only when the job asks for JSON answers
    wants_json = config.sampling.json_schema is not None or jsonl or \
        "json_schema" in source.row_columns.sampling_columns
    fields = [n for n in RESULT_FIELDS[1:] if n != JSON_FIELD or wants_json]
    if jsonl:   # (a cluster job's parts: each row's custom_id as JSON text, then its results)
        schema = pa.schema([pa.field("id", pa.string()), *(pa.field(n, RESULT_TYPES[n]) for n in fields)])
    else:
        schema = pa.schema([*(source.schema.field(n) for n in source.passthrough), pa.field("id", source.key_type),
                            *(pa.field(n, RESULT_TYPES[n]) for n in fields)])
    if on_cluster:
        sink = ClusterParts.on_store(final, meta, schema, partitions, config.storage_options) if remote else \
            ClusterParts.local(final, meta, schema, partitions)
    elif jsonl:
        sink = StoreParts(final, meta, None, config.storage_options) if remote else JsonlLines(final, meta)
    else:
        sink = StoreParts(final, meta, schema, config.storage_options) if remote else ParquetParts(final, meta, schema)
    done = sink.open()
    notes += getattr(sink, "notes", [])   # (a cluster job's: damaged answer files dropped)
    if done:
        if not on_cluster:   # (a cluster job's committed rows are checked when merged)
            _check_resumed_keys(sink, source, done)
        of = f" of {meta['rows']}" if meta["rows"] is not None else ""
        notes.append(f"resuming: {done}{of} rows are already in {sink.dir}; answering the rest")
    for note in notes:  # only once every check has passed
        notify(note)
    if on_cluster:
        lines = ResponseLines(config.model.path or DEFAULT_MODEL_NAME, config.sampling.max_tokens,
                              sink.meta["started"]) if jsonl else None
        return ClusterJob(FileSteps(source, sink, check_keys=keys_on_workers, lines=lines), config, truncate,
                          part_rows, flush_seconds)
    return Job(source, sink, truncate=truncate, part_rows=part_rows, flush_seconds=flush_seconds,
               read_rows=read_rows, config=config)


def run_job(pipeline: Pipeline, input_path, output_path, *, progress: bool | None = None, task: str | None = None,
            prompt: dict | None = None, sampling: dict | None = None, **options) -> JobSummary:
    """The whole job from Python: the same checks and options as ``python -m pipeline run``.
    ``task``, ``prompt``, ``sampling``: this job's, over the pipeline's config (the engines keep
    running; e.g. ``prompt={"template": "Summarize: {text}"}, sampling={"max_tokens": 64}``)."""
    config = pipeline.config.for_job(task, prompt, sampling)
    return prepare_job(input_path, output_path, config=config, **options).run(pipeline, progress=progress)


class Job:
    def __init__(self, source, sink, *, truncate: bool, part_rows: int, flush_seconds: float, read_rows: int,
                 config: "Config"):
        self.source, self.sink = source, sink
        self.config = config   # its task, prompt and sampling settings
        self.truncate = truncate
        self.part_rows, self.flush_seconds, self.read_rows = part_rows, flush_seconds, read_rows

    @property
    def done(self) -> int:
        return self.sink.committed

    def run(self, pipeline: Pipeline, progress: bool | None = None) -> JobSummary:
        from tqdm import tqdm   # start time: loaded when a job runs

        if progress is None:
            progress = sys.stderr.isatty()
        task = Chat(pipeline.tokenizer) if self.source.format == "openai" else get_task_kind(self.config, pipeline.tokenizer)
        summary = JobSummary(resumed=self.sink.resumed)
        t0 = time.perf_counter()
        with tqdm(total=self.source.num_rows, initial=self.done, unit="row", desc="rows", disable=not progress,
                  dynamic_ncols=True) as bar:
            def on_row(r: RowResult) -> None:
                if summary.first_answer_s is None:
                    summary.first_answer_s = time.perf_counter() - t0
                summary.add(r)
                bar.update(1)
                if progress and summary.rows % 256 == 0:
                    bar.set_postfix(out_tok_s=f"{summary.completion_tokens / (time.perf_counter() - t0):.0f}",
                                    errors=summary.errors, refresh=False)

            def on_result(chunk: Chunk, k: int, r: RowResult) -> None:
                r.id = chunk.keys[k]
                on_row(r)

            commits = _Commits(self.sink, self.part_rows, self.flush_seconds)
            to_records = self._to_records(pipeline)
            order = InOrder(emit=lambda chunk, results, lo, hi: commits.add(to_records(chunk, results, lo, hi), hi - lo),
                            on_result=on_result)
            read_error: list[JobError] = []
            rows = _rows(order, self.source.chunks(self.done, self.read_rows), read_error)
            for r in pipeline.stream(rows, task=task, sampling=self.config.sampling, truncate_prompts=self.truncate,
                                     watched=progress, rows_total=self.source.num_rows - self.done):
                order.place(r)
            missing = order.close()
            commits.commit()
            if missing:
                raise JobError(f"{missing} rows got no result from the pipeline; the rows committed so far are "
                               f"kept, run the same command again to resume")
        summary.seconds = time.perf_counter() - t0
        if pipeline.last_report is not None:
            summary.take_workers(pipeline.last_report)
        if read_error:
            raise read_error[0]
        if self.sink.committed != self.source.num_rows:  # never expected; refuse to publish a gap
            raise JobError(f"{self.sink.committed} rows written for {self.source.num_rows} input rows; "
                           f"the partial output in {self.sink.dir} is kept")
        self.sink.finish()
        summary.rows_read = summary.rows_total = summary.rows   # this run's rows, each read and answered
        return summary

    def _to_records(self, pipeline: Pipeline) -> Callable[[Chunk, list, int, int], list]:
        """The output records of rows ``lo:hi`` of a chunk, from their ``results``."""
        if self.source.format == "openai":
            model = pipeline.config.model.path or DEFAULT_MODEL_NAME
            max_tokens, created = pipeline.config.sampling.max_tokens, self.sink.meta["started"]
            return lambda c, results, lo, hi: [output_line(c.start + k, c.keys[k], results[k], model, max_tokens,
                                                           created) for k in range(lo, hi)]
        schema = self.sink.schema
        fields = [n for n in RESULT_FIELDS[1:] if n in schema.names]

        def to_batch(c: Chunk, results: list, lo: int, hi: int) -> list[pa.RecordBatch]:
            carry = c.carry.slice(lo, hi - lo)
            ids = carry.column("id") if self.source.key else pa.array(c.keys[lo:hi], pa.int64())
            columns = [carry.column(n) for n in self.source.passthrough] + [ids]
            columns += [pa.array([getattr(r, n) for r in results[lo:hi]], RESULT_TYPES[n]) for n in fields]
            return [pa.RecordBatch.from_arrays(columns, schema=schema)]
        return to_batch


def _rows(order: InOrder, chunks: Iterator[Chunk], read_error: list) -> Iterator[dict]:
    """The rows to answer, each chunk a group of ``order``; a row that failed a check while
    read is answered at once with its error. An input that cannot be read further ends the
    rows here (its error in ``read_error``): the rows already fed are still answered and
    committed."""
    try:
        for chunk in chunks:
            group = order.open(chunk, len(chunk.keys))
            for k, (row, error) in enumerate(zip(chunk.rows, chunk.errors)):
                if row is None:
                    order.set(group, k, RowResult.failed(-1, ErrorKind.INPUT, error))
                else:
                    order.send(group, k)
                    yield row
            chunk.rows = chunk.errors = None   # the texts are no longer needed here
            order.drain()
    except JobError as exc:
        read_error.append(exc)


class _Commits:
    """Output records waiting for the sink: committed whenever the sink says a commit is due
    (``part_rows`` of them, or ``flush_seconds`` since the last), and at the end."""

    def __init__(self, sink, part_rows: int, flush_seconds: float):
        self.sink, self.part_rows, self.flush_seconds = sink, part_rows, flush_seconds
        self.buffer: list = []
        self.rows = 0

    def add(self, records: list, rows: int) -> None:
        self.buffer += records
        self.rows += rows
        if self.sink.due(self.rows, self.part_rows, self.flush_seconds):
            self.commit()

    def commit(self) -> None:
        self.sink.commit(self.buffer)
        self.buffer, self.rows = [], 0


def _on_cluster(config: Config, partial: dict | None) -> bool:
    """Whether the job runs on the cluster (``jobs.path``; pipeline/jobs/cluster_job.py): any
    file job, Parquet or OpenAI batch JSONL, local, shared or on an object store. ``auto``
    resumes a partial output (``partial``: its ``_job.json``) on the path that wrote it."""
    if config.jobs.path == "auto" and partial is not None and partial.get("path", "client") == "client":
        return False
    return config.jobs.path != "client"


def _fingerprint(files: list[str], fs=None) -> list[list]:
    """Each input file's size and modification time (ns); on an object store (``fs``), its size
    and the store's version stamp (ETag, else its modification time)."""
    out = []
    for f in files:
        if fs is not None:
            info = fs.info(f)
            stamp = next((info[k] for k in ("ETag", "etag", "LastModified", "mtime", "updated", "created")
                          if info.get(k) is not None), "")
            out.append([info.get("size"), str(stamp)])
            continue
        st = os.stat(f)
        out.append([st.st_size, st.st_mtime_ns])
    return out


def _partial_meta(final, storage_options: dict | None = None) -> dict | None:
    """The ``_job.json`` of OUTPUT.partial, if there is one (on an object store, a client-path
    job's manifest holds it under ``meta``)."""
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
    """A partition setting (``partition_rows``, ``partition_bytes``) of a cluster job's partial
    output (its ``_job.json``) that a rerun resumes: the partitions must be the same."""
    return partial.get(setting) if partial is not None and partial.get("path") == "cluster" else None


def _check_resumed_keys(sink, source, done: int) -> None:
    """The committed rows must be the input's first ``done`` rows, key for key."""
    def flat(batches):
        for b in batches:
            yield from b
    position = 0
    for written, expected in zip(flat(sink.committed_keys()), flat(source.key_batches())):
        if written != expected:
            raise JobError(f"{sink.dir} does not match this input: its row {position} has {source.key or 'position'} "
                           f"{written!r}, the input's has {expected!r}; run the original input again, "
                           f"or delete the folder to start over")
        position += 1
        if position == done:
            return
    if position < done:
        raise JobError(f"{sink.dir} holds {done} rows but the input has only {position}; "
                       f"delete the folder to start over")
