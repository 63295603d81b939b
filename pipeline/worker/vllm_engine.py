"""vLLM behind the engine interface: engine arguments from the config, sampling settings as vLLM's, and
``VllmEngine`` over vLLM's ``AsyncLLM``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence, cast

import msgspec

from pipeline.classifier_model import classifier_labels
from pipeline.config import Config
from pipeline.config.shards import ShardConfig
from pipeline.sampling import Sampling
from pipeline.worker.engine import (
    BadSampling,
    Choice,
    Classified,
    Embedding,
    EngineDead,
    Generation,
    Labelled,
    TokenIds,
    adapter_folder,
    adapters_of,
)

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.pooling_params import PoolingParams

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    try:
        with open(cpuinfo) as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return True  # not Linux: leave it to vLLM
    return any(flag in flags for flag in BF16_CPU_FLAGS)


def engine_dtype(config: Config) -> str:
    """On CPU shards ``auto`` is bfloat16 only where the CPU has bf16 instructions: without them vLLM falls back to
    torch's matmuls, several times slower."""
    dtype = config.engine.dtype
    if dtype != "auto" or any(s.kind == "gpu" for s in config.shards):
        return dtype
    return "bfloat16" if cpu_has_bf16() else "float32"


def on_cpu(config: Config, shard: ShardConfig | None) -> bool:
    """Whether the engine runs on CPU: the shard's kind, or without a shard, whether no shard has GPUs."""
    return shard.kind == "cpu" if shard is not None else not any(s.kind == "gpu" for s in config.shards)


def engine_kwargs(model: str, config: Config, shard: ShardConfig | None = None) -> dict:
    """Keyword arguments for vLLM's ``AsyncEngineArgs`` or ``LLM``."""
    e = config.engine
    kwargs = dict(
        model=model,
        tokenizer=model,
        max_model_len=e.max_model_len,
        max_num_seqs=e.max_num_seqs,
        dtype=engine_dtype(config),
        gpu_memory_utilization=e.gpu_memory_utilization,
        enable_prefix_caching=e.enable_prefix_caching,
        seed=e.seed,
        disable_log_stats=True,
        # ``auto``: eager on CPU, where compiling slows every start for little gain, and CUDA graphs on GPUs
        enforce_eager=on_cpu(config, shard) if e.enforce_eager == "auto" else e.enforce_eager,
    )
    if shard is not None and shard.tensor_parallel > 1:
        kwargs["tensor_parallel_size"] = shard.tensor_parallel
    kwargs.update({k: getattr(e, k) for k in ("max_num_batched_tokens", "block_size") if getattr(e, k) is not None})
    if config.lora_slots:
        kwargs.update(
            enable_lora=True,
            max_loras=config.lora_slots,
            max_lora_rank=e.max_lora_rank,
            max_cpu_loras=max(config.lora_slots, len(config.model.adapters)),
        )
    kwargs.update(e.extra)
    return kwargs


def fitted_kwargs(kwargs: dict) -> dict:
    """Fits ``kwargs`` to the model: vLLM refuses an embedding model's ``max_model_len`` above what the model takes,
    and prefix caching for an encoder, whose attention looks both ways."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    model = AsyncEngineArgs(**{**kwargs, "max_model_len": None}).create_model_config()
    out = dict(kwargs)
    if kwargs.get("max_model_len") is not None and model.runner_type == "pooling":
        out["max_model_len"] = min(kwargs["max_model_len"], int(model.max_model_len))
    if not model.is_prefix_caching_supported:
        out["enable_prefix_caching"] = False
    return out


# Settings vLLM fills in by itself, which the bench compares between the pipeline's engines and plain vLLM's.
SETTINGS = (
    ("scheduler_config", "max_num_batched_tokens"),
    ("scheduler_config", "max_num_seqs"),
    ("scheduler_config", "enable_chunked_prefill"),
    ("scheduler_config", "async_scheduling"),
    ("cache_config", "block_size"),
    ("cache_config", "num_gpu_blocks"),
    ("cache_config", "enable_prefix_caching"),
    ("model_config", "dtype"),
    ("scheduler_config", "policy"),
)


def engine_settings(vllm_config) -> dict:
    out = {}
    for section, name in SETTINGS:
        value = getattr(getattr(vllm_config, section, None), name, None)
        out[name] = value if isinstance(value, (bool, int, float, str, type(None))) else str(value)
    return out


def sampling_params(sampling: Sampling) -> SamplingParams:
    import json

    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

    structured = None
    if sampling.json_schema is not None:
        structured = StructuredOutputsParams(json=json.loads(sampling.json_schema))
    elif sampling.choice is not None:
        structured = StructuredOutputsParams(choice=list(sampling.choice))
    fields = {
        k: getattr(sampling, k)
        for k in ("max_tokens", "temperature", "top_p", "top_k", "stop", "seed", "n")
        if getattr(sampling, k) is not None
    }
    if sampling.keeps_logprobs:  # vLLM returns the k likeliest tokens at each place and the one chosen
        fields["logprobs"] = sampling.top_logprobs or 0
    if sampling.keep_special_tokens:
        fields["skip_special_tokens"] = False
    # FINAL_ONLY: one output per request instead of one per generated token, which would
    # wake the worker's event loop for every token of every request.
    return SamplingParams(**fields, structured_outputs=structured, output_kind=RequestOutputKind.FINAL_ONLY)


def label_params(label_ids: Sequence[int]) -> SamplingParams:
    """Reads the log-probabilities of ``label_ids`` as the next token, from the raw logits before any sampling
    setting, as vLLM's own generative scoring does."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        max_tokens=1,
        temperature=0.0,
        logprobs=len(label_ids),
        logprob_token_ids=list(label_ids),
        output_kind=RequestOutputKind.FINAL_ONLY,
    )


def read_labels(output, label_ids: Sequence[int]) -> list[float]:
    """The log-probability of each of ``label_ids`` in a one-step request's output (``label_params``)."""
    place = output.logprobs[0] if output.logprobs else {}
    missing = [t for t in label_ids if t not in place]
    if missing:
        raise RuntimeError(f"the engine returned no log-probability for label tokens {missing}")
    return [float(place[t].logprob) for t in label_ids]


class VllmEngine:
    def __init__(self, model: str, config: Config, shard: ShardConfig | None = None):
        from transformers import AutoTokenizer
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.async_llm import AsyncLLM

        # vLLM's offline ``LLM`` defaults, as plain vLLM gets for a batch. A request's priority is its job's count of
        # admitted requests, so jobs sharing the engine take turns; on CPU, JobFairScheduler also seats a small job.
        cpu = on_cpu(config, shard)
        scheduler: dict[str, Any] = {"scheduler_cls": "pipeline.worker.job_scheduler.JobFairScheduler"} if cpu else {}
        kwargs = fitted_kwargs(engine_kwargs(model, config, shard))
        args = AsyncEngineArgs(**kwargs, scheduling_policy="priority", **scheduler)
        self._llm = AsyncLLM.from_engine_args(args, usage_context=UsageContext.LLM_CLASS)
        cache = self._llm.vllm_config.cache_config
        model_config = self._llm.vllm_config.model_config
        self.settings = engine_settings(self._llm.vllm_config)
        self.block_size = int(cache.block_size)
        self.kv_cache_tokens = int(cache.num_gpu_blocks or 0) * self.block_size
        self.max_model_len = int(model_config.max_model_len)
        pooling = model_config.runner_type == "pooling"
        # A sequence-classification model uses vLLM's "classify" pooling: its head's logits, softmaxed.
        self.labels = classifier_labels(model) if pooling else None
        self.tasks: tuple[str, ...] = ("classify",) if self.labels else ("embed",) if pooling else ("generate",)
        self.embedding_size = int(model_config.embedding_size) if pooling and not self.labels else None
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self._head, self._tail = special_tokens(self.tokenizer) if pooling else ([], [])
        self.special_tokens = len(self._head) + len(self._tail)
        self._pooling: dict[bool | str | None, PoolingParams] = {}  # normalize (or "classify") -> its PoolingParams
        self._params: dict[bytes, SamplingParams] = {}  # encoded Sampling -> its SamplingParams
        self._labels: dict[tuple[int, ...], SamplingParams] = {}  # label token ids -> their SamplingParams
        self.adapters = adapters_of(config)
        self._key = msgspec.msgpack.Encoder().encode

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def params(self, sampling: Sampling) -> SamplingParams:
        """Builds ``SamplingParams`` once per distinct setting; the cache is bounded because per-row settings may
        all differ."""
        key = self._key(sampling)
        params = self._params.get(key)
        if params is None:
            if len(self._params) >= 1024:
                self._params.clear()
            try:
                params = sampling_params(sampling)
            except Exception as exc:  # vLLM checks the values here
                raise BadSampling(str(exc)) from None
            self._params[key] = params
        return params

    async def generate(
        self, prompt_ids: TokenIds, request_id: str, sampling: Sampling, priority: int = 0
    ) -> Generation:
        from vllm.inputs import TokensPrompt

        params = self.params(sampling)  # a bad value raises here, as the row's error
        lora = None
        if sampling.adapter is not None:
            from vllm.lora.request import LoRARequest

            folder = await adapter_folder(self.adapters, sampling.adapter)
            assert self.adapters is not None
            lora = LoRARequest(sampling.adapter, self.adapters.ids[sampling.adapter], folder)
        # ``prompt_ids`` is a list: ``encode`` and ``fit_prompt`` give lists.
        prompt = TokensPrompt(prompt_token_ids=cast(list[int], prompt_ids))
        final = await _last(
            self._llm.generate(prompt, params, request_id=request_id, priority=priority, lora_request=lora)
        )
        top = sampling.top_logprobs or 0
        choices = [
            Choice(
                c.text,
                len(c.token_ids),
                c.finish_reason,
                token_logprobs(c.token_ids, c.logprobs, top) if c.logprobs is not None else None,
            )
            for c in sorted(final.outputs, key=lambda c: c.index)
        ]
        return Generation.of(choices, len(prompt_ids), int(final.num_cached_tokens or 0))

    async def embed(
        self, prompt_ids: TokenIds, request_id: str, normalize: bool | None = None, priority: int = 0
    ) -> Embedding:
        from vllm.pooling_params import PoolingParams

        params = self._pooling.get(normalize)
        if params is None:
            params = self._pooling[normalize] = PoolingParams(task="embed", use_activation=normalize)
        ids = [*self._head, *prompt_ids, *self._tail]
        return Embedding((await self._pool(ids, params, request_id, priority)).float().numpy(), len(ids))

    async def classify(self, prompt_ids: TokenIds, request_id: str, priority: int = 0) -> Classified:
        from vllm.pooling_params import PoolingParams

        params = self._pooling.get("classify")
        if params is None:
            params = self._pooling["classify"] = PoolingParams(task="classify")
        ids = [*self._head, *prompt_ids, *self._tail]
        return Classified((await self._pool(ids, params, request_id, priority)).float().tolist(), len(ids))

    async def _pool(self, ids: list[int], params, request_id: str, priority: int):
        """A pooling request's output tensor: an embedding, or a classifier's label probabilities."""
        from vllm.inputs import TokensPrompt

        prompt = TokensPrompt(prompt_token_ids=ids)
        return (await _last(self._llm.encode(prompt, params, request_id=request_id, priority=priority))).outputs.data

    async def label_logprobs(
        self, prompt_ids: TokenIds, label_ids: Sequence[int], request_id: str, priority: int = 0
    ) -> Labelled:
        from vllm.inputs import TokensPrompt

        key = tuple(label_ids)
        params = self._labels.get(key)
        if params is None:
            if len(self._labels) >= 1024:
                self._labels.clear()
            params = self._labels[key] = label_params(label_ids)
        prompt = TokensPrompt(prompt_token_ids=cast(list[int], prompt_ids))
        final = await _last(self._llm.generate(prompt, params, request_id=request_id, priority=priority))
        return Labelled(read_labels(final.outputs[0], label_ids), len(prompt_ids), int(final.num_cached_tokens or 0))

    async def reset_prefix_cache(self) -> None:
        await self._llm.reset_prefix_cache()

    def shutdown(self) -> None:
        # Stop reading outputs first: vLLM stops the engine core, then cancels its output
        # handler, which in between sees the core gone and logs an EngineDeadError traceback.
        handler = getattr(self._llm, "output_handler", None)
        if handler is not None:
            handler.get_loop().call_soon_threadsafe(handler.cancel)
        # Give the engine core time to exit on its own: with vLLM's default of 5 s it is often killed mid-teardown
        # on a loaded CPU box.
        self._llm.shutdown(timeout=30)
        # vLLM's finalizer would call shutdown again at interpreter exit, when module globals are already gone.
        setattr(self._llm, "shutdown", lambda timeout=None: None)


async def _last(outputs):
    """The last of a request's outputs; a dead engine core becomes ``EngineDead``, the error that stops the shard."""
    from vllm.v1.engine.exceptions import EngineDeadError

    final = None
    try:
        async for out in outputs:
            final = out
    except EngineDeadError as exc:
        raise EngineDead(f"vLLM engine core died: {exc}") from exc
    if final is None or final.outputs == []:  # a generation with no choice
        raise RuntimeError("engine returned no output")
    return final


def special_tokens(tokenizer) -> tuple[list[int], list[int]]:
    """The tokens ``tokenizer`` puts before and after a text, such as BERT's [CLS] and [SEP]."""
    plain = tokenizer.encode("a", add_special_tokens=False)
    marked = tokenizer.encode("a", add_special_tokens=True)
    at = next((i for i in range(len(marked) - len(plain) + 1) if marked[i : i + len(plain)] == plain), None)
    if at is None:
        return [], []
    return marked[:at], marked[at + len(plain) :]


def token_logprobs(token_ids, logprobs, top: int) -> list[dict]:
    """vLLM's per-place log-probabilities as ``{"token", "logprob", "top_logprobs"}`` per answer token, the ``top``
    likeliest first."""
    out = []
    for token_id, place in zip(token_ids, logprobs):
        chosen = place[token_id]
        likeliest = sorted(
            (lp for lp in place.values() if lp.rank is not None and lp.rank <= top), key=lambda lp: lp.rank
        )[:top]
        out.append(
            {
                "token": chosen.decoded_token or "",
                "logprob": float(chosen.logprob),
                "top_logprobs": [{"token": lp.decoded_token or "", "logprob": float(lp.logprob)} for lp in likeliest],
            }
        )
    return out
