"""Parquet in -> Parquet out: one output row per input row.

Output columns: the input's own columns (except ``document`` and ``question``,
which the caller already has) followed by ``id, answer, error, prompt_tokens,
cached_tokens, completion_tokens, shard, latency_s``.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.client import RESULT_FIELDS, Pipeline, RowResult

REQUIRED_COLUMNS = ("document", "question")
_RESULT_TYPES = {
    "answer": pa.string(), "error": pa.string(), "prompt_tokens": pa.int64(), "cached_tokens": pa.int64(),
    "completion_tokens": pa.int64(), "shard": pa.string(), "latency_s": pa.float64(),
}


class JobError(RuntimeError):
    """The job cannot start; the message says why and what to do."""


@dataclass
class JobSummary:
    rows: int = 0
    errors: int = 0
    seconds: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    per_shard: dict = field(default_factory=dict)
    workers: str | None = None   # what happened to workers during the job, if anything did

    @property
    def requests_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    @property
    def output_tokens_per_s(self) -> float:
        return self.completion_tokens / self.seconds if self.seconds else 0.0

    @property
    def cached_share(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def add(self, r: RowResult) -> None:
        self.rows += 1
        self.errors += r.error is not None
        self.prompt_tokens += r.prompt_tokens
        self.cached_tokens += r.cached_tokens
        self.completion_tokens += r.completion_tokens
        if r.shard is not None:
            self.per_shard[r.shard] = self.per_shard.get(r.shard, 0) + 1

    def render(self) -> str:
        shards = ", ".join(f"{k}: {v}" for k, v in sorted(self.per_shard.items())) or "none"
        return (f"rows: {self.rows}  errors: {self.errors}  time: {self.seconds:.1f} s\n"
                f"throughput: {self.requests_per_s:.2f} requests/s, {self.output_tokens_per_s:.1f} output tokens/s\n"
                f"prompt tokens: {self.prompt_tokens}  cached: {self.cached_tokens} ({self.cached_share:.1%})  "
                f"completion tokens: {self.completion_tokens}\n"
                f"rows per shard: {shards}"
                + (f"\nworkers: {self.workers}" if self.workers else ""))


def read_input(path: str | os.PathLike) -> pa.Table:
    p = Path(path)
    if not p.exists():
        raise JobError(f"input not found: {p}")
    try:
        table = pq.read_table(p)
    except (pa.ArrowInvalid, OSError) as exc:
        raise JobError(f"cannot read {p} as Parquet: {exc}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise JobError(f"input {p} lacks required column(s) {', '.join(missing)}; "
                       f"it has: {', '.join(table.column_names) or '(none)'}")
    return table


def check_output(path: str | os.PathLike) -> Path:
    out = Path(path)
    if not out.parent.exists():
        raise JobError(f"output folder does not exist: {out.parent}")
    if not os.access(out.parent, os.W_OK):
        raise JobError(f"output folder is not writable: {out.parent}")
    return out


def run_parquet(pipeline: Pipeline, input_path, output_path, *, progress: bool | None = None) -> JobSummary:
    table = read_input(input_path)
    out = check_output(output_path)
    rows = table.select(list(REQUIRED_COLUMNS) + (["id"] if "id" in table.column_names else [])).to_pylist()
    if progress is None:
        progress = sys.stderr.isatty()
    summary = JobSummary()
    results: list[RowResult | None] = [None] * len(rows)
    t0 = time.perf_counter()
    from tqdm import tqdm

    with tqdm(total=len(rows), unit="row", disable=not progress, desc="rows") as bar:
        for r in pipeline.stream(rows):
            results[r.index] = r
            summary.add(r)
            bar.update(1)
            bar.set_postfix(tok_s=f"{summary.completion_tokens / max(time.perf_counter() - t0, 1e-9):.0f}")
    summary.seconds = time.perf_counter() - t0
    if pipeline.last_report is not None and pipeline.last_report.events:
        summary.workers = pipeline.last_report.summary()
    write_output(table, results, out)
    return summary


def write_output(table: pa.Table, results: list[RowResult], path: Path) -> None:
    passthrough = [c for c in table.column_names if c not in (*REQUIRED_COLUMNS, *RESULT_FIELDS)]
    columns = {c: table.column(c) for c in passthrough}
    ids = [r.id for r in results]
    columns["id"] = table.column("id") if "id" in table.column_names else pa.array(ids, pa.int64())
    for name in RESULT_FIELDS[1:]:
        columns[name] = pa.array([getattr(r, name) for r in results], _RESULT_TYPES[name])
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    pq.write_table(pa.table(columns), tmp)
    os.replace(tmp, path)  # a killed job never leaves a half-written output
