"""One run of one contender on one burst, measured into a ``RunResult``.

Plain vLLM gets its prompts split round-robin or by the pipeline's placement; the pipeline runs the burst
as a stream, a file job, or a file of ``/v1/completions`` lines. ``Prepared`` holds a burst's prompts,
tokenized once for every contender."""

from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.bench.cpu_share import cores_used, minor_faults
from pipeline.bench.prefill_ideal import block_ideal, token_ideal
from pipeline.config import Config


@dataclass
class Prepared:
    """A burst's rows turned into prompts once, for every contender."""

    rows: list[dict]
    prefix_ids: list[list[int]]
    suffix_ids: list[list[int]]
    ideal_prefill: int  # a perfect prefix cache per shard: every distinct token prefix once
    ideal_prefill_blocks: int  # the same at the KV cache's block granularity
    # (pipeline/bench/prefill_ideal.py)
    task: Any = None  # the task kind that split the rows (None: the pipeline's own)

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
        return cls(
            rows, prefixes, suffixes, token_ideal(prompts, shards), block_ideal(prompts, block_size, shards), task
        )


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
    cores: dict = field(default_factory=dict)  # role -> cores used during the burst
    # (pipeline/bench/cpu_share.py)
    faults: dict = field(default_factory=dict)  # role -> minor page faults during the burst
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
        d.update(
            requests_per_s=self.requests_per_s,
            output_tokens_per_s=self.output_tokens_per_s,
            prefill_computed=self.prefill_computed,
        )
        return d


def _correct(expected: str, answer: str | None) -> bool:
    return answer is not None and expected.lower() in answer.lower()


def standalone_assignment(name: str, shards: list[str], rows: list[dict], pipeline, task=None) -> dict[str, list[int]]:
    """Row indices per shard for the standalone contender ``name``, in the order each shard gets
    them: ``standalone-rr`` round-robin; ``standalone-routed`` (and ``standalone-sorted``, its
    name on the big job) the pipeline's own placement (``placed_assignment``), each shard's rows
    grouped by document as its answer tasks take them; ``standalone-arrival`` the same placement,
    each shard's rows in input order. ``task``: the kind that splits the rows (default: the
    pipeline's)."""
    assign: dict[str, list[int]] = {s: [] for s in shards}
    if name == "standalone-rr":
        for i in range(len(rows)):
            assign[shards[i % len(shards)]].append(i)
    elif name in ("standalone-routed", "standalone-arrival", "standalone-sorted"):
        from pipeline.token_estimate import CHARS_PER_TOKEN

        parts = [(task or pipeline.task).split(row) for row in rows]
        assign.update(
            placed_assignment(
                [p.prefix for p in parts],
                [p.suffix for p in parts],
                shards,
                CHARS_PER_TOKEN * pipeline.config.sampling.max_tokens,
                by_document=name != "standalone-arrival",
            )
        )
    else:
        raise ValueError(f"unknown standalone contender {name!r}")
    return assign


def placed_assignment(
    prefixes: list[str], suffixes: list[str], shards: list[str], decode_bytes: int, by_document: bool = False
) -> dict[str, list[int]]:
    """Row indices per shard as a cluster job places the rows' documents (each document's rows
    on one shard; ``place_task`` of pipeline/steps/cluster_tasks.py on the same per-document
    counts, no document held by an engine: what it sees after ``reset_cache``). Each shard's rows
    in input (arrival) order, or ``by_document``: a document's rows together, in input order,
    documents in the order of their first row."""
    import numpy as np
    import pyarrow as pa

    from pipeline.prefix_memory import prefix_digest
    from pipeline.steps.cluster_tasks import place_task  # (imports Dask: here, not at the top)

    digest_of: dict[str, int] = {}
    docs: dict[int, list[int]] = {}  # digest -> [rows, prefix bytes, suffix bytes, first row], first-seen order
    row_digest = []
    for i, (prefix, suffix) in enumerate(zip(prefixes, suffixes)):
        d = digest_of.get(prefix)
        if d is None:
            d = digest_of[prefix] = prefix_digest(prefix)
        doc = docs.setdefault(d, [0, len(prefix.encode()), 0, i])
        doc[0] += 1
        doc[2] += len(suffix.encode())
        row_digest.append(d)
    assign: dict[str, list[int]] = {s: [] for s in shards}
    if not row_digest:
        return assign
    table = pa.table(
        {
            "digest": pa.array(list(docs), pa.uint64()),
            "rows": pa.array([v[0] for v in docs.values()], pa.int64()),
            "prefix_bytes": pa.array([v[1] for v in docs.values()], pa.int64()),
            "suffix_bytes": pa.array([v[2] for v in docs.values()], pa.int64()),
            "first": pa.array([v[3] for v in docs.values()], pa.int64()),
        }
    )
    placement = place_task(list(shards), {}, 1 << 62, decode_bytes, table)
    buckets = placement.bucket_of(np.array(list(docs), np.uint64)).tolist()
    shard_of = {d: placement.buckets[b].shard for d, b in zip(docs, buckets)}
    if by_document:
        rows_of: dict[int, list[int]] = {d: [] for d in docs}
        for i, d in enumerate(row_digest):
            rows_of[d].append(i)
        for d, idx in rows_of.items():
            assign[shard_of[d]] += idx
    else:
        for i, d in enumerate(row_digest):
            assign[shard_of[d]].append(i)
    return assign


def run_standalone(name, shards, prep: Prepared, pipeline, burst, pair, roles=None) -> RunResult:
    """Prompts split as ``standalone_assignment`` says for ``name`` (``pipeline``: the started
    pipeline whose task and placement it uses; not needed for round-robin)."""
    assign = standalone_assignment(name, list(shards.shards), prep.rows, pipeline, prep.task)
    shards.reset_cache()
    before = roles.snapshot() if roles else None
    wall, finish, outputs, gc = shards.run(
        {k: [prep.prefix_ids[i] + prep.suffix_ids[i] for i in v] for k, v in assign.items()}
    )
    res = RunResult(
        name,
        burst,
        pair,
        wall,
        len(prep.rows),
        0,
        0,
        0,
        0,
        0,
        0,
        prep.ideal_prefill,
        prep.ideal_prefill_blocks,
        {k: len(v) for k, v in assign.items()},
        finish,
        gc,
    )
    if before is not None:  # (with roles: their snapshot before)
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


def run_pipeline(pipeline, job: Config, prep: Prepared, burst, pair, roles=None) -> RunResult:
    """``job``: the config whose job settings (``intake``, ``routing``) this run uses: the
    pipeline's own, or a ``replace`` of it for a variant; the pipeline keeps its own config."""
    pipeline.reset_cache()
    runner = _running_with(pipeline, job)
    res = _pipeline_result(prep, burst, pair)
    busy0 = _engine_busy(pipeline)
    before = roles.snapshot() if roles else None
    t0 = time.perf_counter()
    for r in runner.stream(prep.rows):
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
    if before is not None:  # (with roles: their snapshot before)
        after = roles.snapshot()
        res.cores, res.faults = cores_used(before, after, res.wall_s), minor_faults(before, after)
    _engine_figures(pipeline, res, busy0)
    return res


def run_pipeline_job(pipeline, job: Config, prep: Prepared, burst, pair, roles=None) -> RunResult:
    """The burst as a file job: the rows written to a
    Parquet file, ``prepare_job`` then ``ClusterJob.run`` after ``reset_cache``; the clock covers
    ``run`` (reading, placing, answering, merging), not writing the input or ``prepare_job``'s
    checks. The figures are read back from the output file. ``job`` as in ``run_pipeline``."""
    import tempfile
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    res = _pipeline_result(prep, burst, pair)
    expected = {row["id"]: row["expected"] for row in prep.rows}
    with tempfile.TemporaryDirectory(prefix="bench-bigjob-") as tmp:
        src, out = Path(tmp) / "input.parquet", Path(tmp) / "output.parquet"
        pq.write_table(pa.Table.from_pylist(prep.rows), src)
        busy0 = _timed_file_job(pipeline, job, src, out, res, roles)
        table = pq.read_table(
            out, columns=["id", "answer", "error", "prompt_tokens", "cached_tokens", "completion_tokens", "shard"]
        )
    for r in table.to_pylist():
        res.answered += 1
        res.errors += r["error"] is not None
        res.correct += _correct(expected[r["id"]], r["answer"])
        res.prompt_tokens += r["prompt_tokens"] or 0
        res.cached_tokens += r["cached_tokens"] or 0
        res.completion_tokens += r["completion_tokens"] or 0
        if r["shard"] is not None:
            res.per_shard[r["shard"]] = res.per_shard.get(r["shard"], 0) + 1
    _engine_figures(pipeline, res, busy0)
    return res


def run_pipeline_lines(pipeline, job: Config, prep: Prepared, burst, pair, roles=None) -> RunResult:
    """The burst's completion rows (``workloads.completion_lines``) as a file job of
    ``/v1/completions`` lines, a line per document with its prompts in one list, timed as
    ``run_pipeline_job`` times its job; the figures read back from the output lines."""
    import tempfile
    from pathlib import Path

    res = _pipeline_result(prep, burst, pair)
    lines: dict[int, list[dict]] = {}
    for row in prep.rows:
        lines.setdefault(row["line"], []).append(row)
    with tempfile.TemporaryDirectory(prefix="bench-completions-") as tmp:
        src, out = Path(tmp) / "input.jsonl", Path(tmp) / "output.jsonl"
        src.write_text(
            "".join(
                json.dumps(
                    {
                        "custom_id": f"line-{n}",
                        "method": "POST",
                        "url": "/v1/completions",
                        "body": {"prompt": [(r["prefix"] or "") + r["prompt"] for r in rows]},
                    }
                )
                + "\n"
                for n, rows in lines.items()
            )
        )
        busy0 = _timed_file_job(pipeline, job, src, out, res, roles)
        answers = [json.loads(x) for x in out.read_text().splitlines()]
    for answer in answers:
        rows = lines[int(answer["custom_id"].removeprefix("line-"))]
        body = answer["response"]["body"]
        if body is None:
            res.errors += len(rows)
            continue
        res.answered += len(rows)
        res.correct += sum(_correct(r["expected"], c["text"]) for r, c in zip(rows, body["choices"]))
        res.prompt_tokens += body["usage"]["prompt_tokens"]
        res.cached_tokens += body["usage"]["prompt_tokens_details"]["cached_tokens"]
        res.completion_tokens += body["usage"]["completion_tokens"]
    _engine_figures(pipeline, res, busy0)
    return res


def _pipeline_result(prep: Prepared, burst, pair) -> RunResult:
    """The pipeline's run of ``prep``, its figures still to take."""
    return RunResult(
        "pipeline",
        burst,
        pair,
        0.0,
        len(prep.rows),
        0,
        0,
        0,
        0,
        0,
        0,
        prep.ideal_prefill,
        prep.ideal_prefill_blocks,
        {},
        {},
        {},
    )


def _timed_file_job(pipeline, job: Config, src, out, res: RunResult, roles) -> dict[str, float]:
    """``src`` answered into ``out`` as a file job after ``reset_cache``; the clock (``res.wall_s``,
    and the roles' cores and faults) covers ``run``, not ``prepare_job``'s checks. The engines'
    busy seconds before it (``_engine_figures``)."""
    from pipeline.jobs.job import prepare_job  # (imports Dask: here, not at the top)

    pipeline.reset_cache()
    cluster_job = prepare_job(src, out, config=job, notify=lambda m: None)
    busy0 = _engine_busy(pipeline)
    before = roles.snapshot() if roles else None
    t0 = time.perf_counter()
    cluster_job.run(pipeline, progress=False)
    res.wall_s = time.perf_counter() - t0
    if before is not None:  # (with roles: their snapshot before)
        after = roles.snapshot()
        res.cores, res.faults = cores_used(before, after, res.wall_s), minor_faults(before, after)
    return busy0


def _engine_figures(pipeline, res: RunResult, busy0: dict[str, float]) -> None:
    """The workers' GC pauses and each engine's idle time over the run (``busy0``: before it)."""
    stats = pipeline.worker_stats()
    res.gc = {s["shard"]: s["gc"] for s in stats}
    res.engine_idle_s = {
        s["shard"]: res.wall_s - (s["metrics"]["engine_busy_s"] - busy0.get(s["shard"], 0.0)) for s in stats
    }


def _running_with(pipeline, job: Config):
    """``pipeline`` as it runs a job with ``job``'s settings: itself when that is its own config,
    else a shallow copy with ``job`` as its config, which shares its cluster and engines. The
    pipeline's own config is left as it is. (``Pipeline.stream`` reads the intake settings from
    its pipeline's config; it takes none per job.)"""
    if job is pipeline.config:
        return pipeline
    runner = copy.copy(pipeline)
    runner.config = job
    return runner


def _engine_busy(pipeline) -> dict[str, float]:
    return {s["shard"]: s["metrics"]["engine_busy_s"] for s in pipeline.worker_stats()}
