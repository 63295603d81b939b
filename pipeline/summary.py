"""What happened during a job, for streams and file jobs alike: each task's ``Figures`` add up into
one ``JobSummary`` with what happened to the workers."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.results import ErrorKind, RowResult

LOST, REJOINED, GONE = "lost", "rejoined", "gone"


@dataclass
class ShardEvent:
    kind: str  # LOST: its worker left; REJOINED: a new worker serves it; GONE: given up on
    shard: str
    worker: str | None
    at: float  # time.time()

    def as_dict(self) -> dict:
        return {"kind": self.kind, "shard": self.shard, "worker": self.worker, "at": self.at}


def error_groups(errors) -> dict:
    """Rows per ``RowResult.error_group`` of an Arrow array of error texts, nulls skipped."""
    by_kind: dict = {}
    for text in errors.drop_null().to_pylist():
        group = RowResult(0, error=text, error_kind=ErrorKind.of(text)).error_group
        by_kind[group] = by_kind.get(group, 0) + 1
    return by_kind


@dataclass
class Figures:
    """What one task of a job counted. A read task answers the rows it could not read with the reason."""

    read: int = 0  # rows read from the input
    rows: int = 0  # rows answered, with or without error
    errors: int = 0
    errors_by_kind: dict = field(default_factory=dict)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    shard: str | None = None  # where an answer task ran
    unreadable: str | None = None  # why a partition could not be read (its rows wait for a rerun)

    @classmethod
    def of_read(cls, read: int, errors) -> "Figures":
        """A read task's figures; ``errors`` holds the texts of the rows that failed."""
        return cls(read=read, rows=len(errors), errors=len(errors), errors_by_kind=error_groups(errors))

    @classmethod
    def of_answers(cls, table, shard: str | None) -> "Figures":
        """An answer task's figures, from an Arrow table of its answered rows."""
        import pyarrow.compute as pc

        errors = table.column("error")
        prompt, cached, completion = (
            pc.sum(table.column(k)).as_py() or 0 for k in ("prompt_tokens", "cached_tokens", "completion_tokens")
        )
        return cls(
            rows=table.num_rows,
            errors=len(errors) - errors.null_count,
            errors_by_kind=error_groups(errors),
            shard=shard,
            prompt_tokens=prompt,
            cached_tokens=cached,
            completion_tokens=completion,
        )

    def count_answers(self, table) -> None:
        self += Figures.of_answers(table, self.shard)

    def __iadd__(self, more: "Figures") -> "Figures":
        for k in ("read", "rows", "errors", "prompt_tokens", "cached_tokens", "completion_tokens"):
            setattr(self, k, getattr(self, k) + getattr(more, k))
        for group, n in more.errors_by_kind.items():
            self.errors_by_kind[group] = self.errors_by_kind.get(group, 0) + n
        return self


@dataclass
class JobSummary:
    job: str = ""  # the stream's job id (its Dask span's name); "" before a stream ran
    title: str | None = None  # what the job is to its user (the batch service: the batch's id)
    rows: int = 0  # rows answered (each exactly once) in this run, with or without error
    errors: int = 0  # rows answered with an error (input, engine, worker or output)
    errors_by_kind: dict = field(default_factory=dict)  # RowResult.error_group -> rows
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    per_shard: dict = field(default_factory=dict)  # shard -> rows it answered
    rows_read: int = 0  # rows read from the input so far
    rows_total: int | None = None  # rows in the input: known up front (a sized input) or once it is all read
    resumed: int = 0  # file jobs: rows already in the output when this run started
    seconds: float = 0.0  # file jobs: the run's time
    first_answer_s: float | None = None  # file jobs: from the run's start to its first answer
    events: list[ShardEvent] = field(default_factory=list)
    buckets_moved: int = 0  # buckets given to another shard after theirs was given up on

    def take(self, f: Figures) -> None:
        self.rows += f.rows
        self.errors += f.errors
        self.prompt_tokens += f.prompt_tokens
        self.cached_tokens += f.cached_tokens
        self.completion_tokens += f.completion_tokens
        if f.shard is not None:
            self.per_shard[f.shard] = self.per_shard.get(f.shard, 0) + f.rows
        for group, n in f.errors_by_kind.items():
            self.errors_by_kind[group] = self.errors_by_kind.get(group, 0) + n

    def add(self, r: RowResult) -> None:
        self.rows += 1
        if r.error is not None:
            self.errors += 1
            group = r.error_group
            self.errors_by_kind[group] = self.errors_by_kind.get(group, 0) + 1
        self.prompt_tokens += r.prompt_tokens
        self.cached_tokens += r.cached_tokens
        self.completion_tokens += r.completion_tokens
        if r.shard is not None:
            self.per_shard[r.shard] = self.per_shard.get(r.shard, 0) + 1

    @property
    def requests_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    @property
    def output_tokens_per_s(self) -> float:
        return self.completion_tokens / self.seconds if self.seconds else 0.0

    @property
    def cached_share(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def workers_lost(self) -> int:
        return sum(e.kind == LOST for e in self.events)

    @property
    def workers(self) -> str | None:
        """What happened to workers during the job, if anything did."""
        return self.summary() if self.events else None

    def summary(self) -> str:
        """One line: rows and, if workers were lost, what happened to them."""
        parts = [f"{self.rows} rows"]
        if self.events:
            parts += [f"{self.workers_lost} worker(s) lost", f"{self.buckets_moved} bucket(s) moved to another shard"]
            parts += [f"{e.kind}: {e.shard} ({e.worker})" for e in self.events]
        return "; ".join(parts)

    def render(self) -> str:
        """The file job's summary, as the CLI prints it."""
        shards = ", ".join(f"{k}: {v}" for k, v in sorted(self.per_shard.items())) or "none"
        kinds = "".join(f"\n  {k}: {v}" for k, v in sorted(self.errors_by_kind.items(), key=lambda kv: -kv[1]))
        resumed = f" (+{self.resumed} already written before this run)" if self.resumed else ""
        first = f" (first answer after {self.first_answer_s:.2f} s)" if self.first_answer_s is not None else ""
        return (
            f"rows: {self.rows}{resumed}  errors: {self.errors}  time: {self.seconds:.1f} s{first}{kinds}\n"
            f"throughput: {self.requests_per_s:.2f} rows/s, {self.output_tokens_per_s:.1f} output tokens/s\n"
            f"tokens: input {self.prompt_tokens} (cached {self.cached_tokens}, {self.cached_share:.1%}), "
            f"output {self.completion_tokens}, total {self.prompt_tokens + self.completion_tokens}\n"
            f"rows per shard: {shards}" + (f"\nworkers: {self.workers}" if self.workers else "")
        )

    def as_dict(self) -> dict:
        """The stream's counts for the dashboard."""
        return {
            "job": self.job,
            "title": self.title,
            "rows": self.rows,
            "workers_lost": self.workers_lost,
            "buckets_moved": self.buckets_moved,
            "rows_read": self.rows_read,
            "rows_total": self.rows_total,
            "rows_with_error": self.errors,
            "events": [e.as_dict() for e in self.events],
        }
