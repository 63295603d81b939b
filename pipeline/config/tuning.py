"""The config's tuning sections, under ``advanced:`` in cluster.yaml: how workers admit requests
(intake), how much they remember for placement (routing), how the client recovers from a lost
worker (recovery), how file jobs are cut into tasks (jobs). Their defaults suit most jobs.

Code reads them as ``config.intake`` etc. (properties of pipeline/config/config_file.py's ``Config``). A
file from before ``advanced:`` has them at the top level: :func:`tuning_sections_moved` reads
them into ``advanced``, with a :class:`ConfigNote`.
"""

from __future__ import annotations

import warnings
from typing import Any

from pydantic import Field, field_validator

from pipeline.config.base import ConfigNote, Section


class RoutingConfig(Section):
    # What each worker remembers its engine holds (prefix digests, LRU, for the next job's
    # placement: pipeline/prefix_memory.py) is bounded: at most this many KV blocks' worth
    # across the cluster (~150 bytes each).
    max_blocks: int = Field(250_000, gt=0)


class IntakeConfig(Section):
    # Requests admitted to one worker's engine at once (across all its batches).
    max_in_flight: int = Field(96, gt=0)
    # An answer task starts no new document while the requests in flight hold this share of
    # its engine's KV cache (0 disables the check).
    kv_budget_share: float = Field(0.9, ge=0)
    # Requests each answer task admits until its first answer, so the first answers come in a
    # second or two instead of with a full engine's batch, at some cost in throughput. 0: no
    # limit; null: 1 when someone watches the job (a progress bar on a terminal), else no limit.
    first_answer_rows: int | None = Field(None, ge=0)
    # Pipeline.stream: rows of a Python iterable read and answered as one cluster job (a window;
    # a document's questions are grouped within it; bounds the client's memory)...
    read_ahead_rows: int = Field(50_000, gt=0)
    # ...and the characters of prompt text they hold, each prefix counted once (when most
    # documents in the window are distinct, this bound comes first).
    read_ahead_chars: int = Field(32_000_000, gt=0)
    # Tasks one worker runs at once (the worker's nthreads).
    concurrent_batches: int = Field(4, gt=0)

    def first_rows(self, watched: bool) -> int:
        """``first_answer_rows``; unset: 1 when someone watches the job (a terminal), else 0."""
        return self.first_answer_rows if self.first_answer_rows is not None else int(watched)


class RecoveryConfig(Section):
    # How often the client checks that every shard still has a worker (seconds).
    poll_interval_s: float = Field(0.5, gt=0)
    # A shard that has had no worker able to answer this long is given up on: its unfinished
    # buckets go to the surviving shards. Counted from the client's first poll that sees
    # its worker gone (or replaced) until a worker for it has a ready engine: a restarted worker
    # joins in seconds but its engine may start for minutes (pipeline/jobs/recovery.py).
    rejoin_timeout_s: float = Field(60.0, ge=0)
    # A row is sent at most this many times (retries after a lost worker or a dead engine);
    # then it is answered with a `worker: ...` error.
    max_row_attempts: int = Field(3, gt=0)


class JobsConfig(Section):
    """File jobs (``python -m pipeline run``, ``run_job``)."""

    # Parquet: input rows per read task (whole row groups where the files allow).
    partition_rows: int = Field(65_536, gt=0)
    # OpenAI batch JSONL: bytes of the file per read task (cut at line ends).
    partition_bytes: int = Field(64 * 2**20, gt=0)
    # Input partitions a worker reads (into prompt rows) or splits at a time. Both are CPU-bound
    # Arrow work that holds the partition's text while it runs: more at once on a worker's
    # core(s) only contend, and raise the worker's peak memory (1M rows on 2 one-core shards:
    # read in 5.8-6.9 s one at a time, 8.5-10.5 s four at a time). Read when the workers start.
    reads_per_worker: int = Field(1, gt=0)
    # Rows per answer task: a shard's documents are answered in buckets of at most this many
    # rows (a document is split only when it alone has more rows than that, or than a shard's
    # fair share of a large job).
    bucket_rows: int = Field(50_000, gt=0)
    # Bytes of a job's data (read rows, pieces, kept answers) a worker holds in memory before
    # Dask spills the least recently used to disk, in the worker's local directory: "auto" (the
    # default), 40 % of this machine's memory shared among its shards; a size ("8GB", or bytes);
    # 0: never spill. Read when the workers start.
    worker_memory: int | str = "auto"

    @field_validator("worker_memory")
    @classmethod
    def _memory_size(cls, value: int | str) -> int | str:
        if value == "auto":
            return value
        from dask.utils import parse_bytes

        try:
            size = parse_bytes(value)
        except (ValueError, TypeError):
            raise ValueError("must be auto, 0 or a size such as 8GB") from None
        if size < 0:
            raise ValueError("must not be negative")
        return size

    def worker_memory_bytes(self, shards: int) -> int:
        """Each of ``shards`` workers' ``worker_memory`` in bytes (0: no spilling)."""
        if self.worker_memory != "auto":
            return int(self.worker_memory)
        import psutil

        return int(AUTO_WORKER_MEMORY_SHARE * psutil.virtual_memory().total / max(1, shards))


AUTO_WORKER_MEMORY_SHARE = 0.4  # of the machine's memory, for all its workers' job data (the rest: engines, the OS)


class AdvancedConfig(Section):
    """``advanced:``: the tuning sections (docs/configuration.md, "Advanced tuning")."""

    intake: IntakeConfig = IntakeConfig()
    routing: RoutingConfig = RoutingConfig()
    recovery: RecoveryConfig = RecoveryConfig()
    jobs: JobsConfig = JobsConfig()


TUNING_SECTIONS = tuple(AdvancedConfig.model_fields)  # intake, routing, recovery, jobs


def tuning_sections_moved(data: Any) -> Any:
    """A config mapping with the tuning sections given at the top level (their place before
    ``advanced:``) moved under ``advanced``, with one :class:`ConfigNote`. A section given in
    both places is an error naming both."""
    if not isinstance(data, dict):
        return data
    old = [name for name in TUNING_SECTIONS if name in data]
    if not old:
        return data
    advanced = data.get("advanced")
    if advanced is None:
        advanced = {}
    elif not isinstance(advanced, dict):
        return data  # (``advanced`` itself is reported invalid; the old sections as unknown keys)
    both = [name for name in old if name in advanced]
    if both:
        raise ValueError(
            "; ".join(
                f"{name}: and advanced.{name}: are one section, given twice: keep advanced.{name}" for name in both
            )
        )
    sections = " and ".join(", ".join(f"{name}:" for name in old).rsplit(", ", 1))
    paths = ", ".join(f"advanced.{name}" for name in old)
    warnings.warn(
        f"{sections} {'is' if len(old) == 1 else 'are'} now under advanced: ({paths}); indent "
        f"{'it' if len(old) == 1 else 'them'} under an advanced: section",
        ConfigNote,
        stacklevel=2,
    )
    rest = {key: value for key, value in data.items() if key not in old}
    return {**rest, "advanced": {**advanced, **{name: data[name] for name in old}}}
