"""The narrow interface between a worker and its engine. ``VllmEngine`` wraps vLLM's ``AsyncLLM``; ``FakeEngine``
answers at once, to measure the pipeline's own plumbing and for tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Protocol, Sequence, SupportsIndex, overload

from pipeline.config import Config
from pipeline.sampling import Sampling
from pipeline.worker.adapters import AdapterError, Adapters

if TYPE_CHECKING:
    import numpy as np
    from typing_extensions import Self


class EngineDead(RuntimeError):
    """The engine can serve no more requests, for instance because its engine-core process died."""


class BadSampling(ValueError):
    """The engine refused a request's sampling settings; the message says which."""


def adapters_of(config: Config) -> Adapters | None:
    """The shard's adapters, or None where the engines run without LoRA."""
    if not config.lora_slots:
        return None
    return Adapters(config.model.adapters, config.model.cache_path, config.engine.max_lora_rank, config.storage_options)


async def adapter_folder(adapters: Adapters | None, adapter: str) -> str:
    """A row's adapter's local folder; an unusable adapter raises ``BadSampling``, the row's error."""
    if adapters is None:
        raise BadSampling(
            f"adapter {adapter!r}: this cluster's engines run without adapters; list them in "
            f"model.adapters (or set engine.max_loras) and start the cluster again"
        )
    try:
        return await adapters.folder(adapter)
    except AdapterError as exc:
        raise BadSampling(str(exc)) from None


@dataclass
class Choice:
    """One of a request's ``sampling.n`` answers."""

    text: str
    completion_tokens: int
    finish_reason: str | None = None  # "stop" or "length"
    # per answer token, when asked for: {"token", "logprob", "top_logprobs": [{"token", "logprob"}, ...]}
    logprobs: list[dict] | None = None


@dataclass
class Generation:
    text: str
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int  # every answer's tokens
    finish_reason: str | None = None  # "stop" or "length"
    logprobs: list[dict] | None = None  # the first answer's, when asked for
    choices: list[Choice] | None = None  # every answer, when more than one was asked for

    @classmethod
    def of(cls, choices: list[Choice], prompt_tokens: int, cached_tokens: int) -> "Generation":
        first = choices[0]
        return cls(
            text=first.text,
            prompt_tokens=prompt_tokens,
            cached_tokens=cached_tokens,
            completion_tokens=sum(c.completion_tokens for c in choices),
            finish_reason=first.finish_reason,
            logprobs=first.logprobs,
            choices=choices if len(choices) > 1 else None,
        )


@dataclass
class Labelled:
    """The log-probability of each label's first token as the prompt's next token, over the whole vocabulary, in the
    labels' order."""

    logprobs: list[float]
    prompt_tokens: int
    cached_tokens: int


@dataclass
class Embedding:
    vector: Sequence[float] | np.ndarray  # float32 values (a numpy array from vLLM)
    prompt_tokens: int


@dataclass
class Classified:
    """A classification model's probability of each of its labels: its head's logits, softmaxed."""

    probs: Sequence[float]
    prompt_tokens: int


class TokenIds(Protocol):
    """A text's token ids as an engine gives them: a list, or any int sequence that ``+`` joins and slicing cuts
    into its own kind, such as the fake engine's ``array("I")``."""

    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[int]: ...
    @overload
    def __getitem__(self, index: SupportsIndex, /) -> int: ...
    @overload
    def __getitem__(self, index: slice, /) -> Self: ...
    def __add__(self, other: Self, /) -> Self: ...


class Engine(Protocol):
    block_size: int  # tokens per KV-cache block, the prefix cache's unit
    kv_cache_tokens: int  # tokens the engine's KV cache holds
    max_model_len: int  # the longest prompt plus answer the engine takes
    tasks: tuple[str, ...]  # "generate" and/or "embed", or "classify"
    labels: tuple[str, ...] | None  # a classification model's labels, in its head's order
    embedding_size: int | None  # an embedding's length, for an embedding engine
    special_tokens: int  # the tokens ``embed`` adds to a text, such as [CLS] and [SEP]
    settings: dict  # effective settings as plain values, which the bench compares
    tokenizer: Any  # the model's tokenizer, which a tool-call parser reads answers with

    def encode(self, text: str) -> TokenIds: ...
    # ``priority``: lower goes first among the requests waiting inside the engine.
    async def generate(
        self, prompt_ids: TokenIds, request_id: str, sampling: Sampling, priority: int = 0
    ) -> Generation: ...
    # The engine adds the model's special tokens; ``normalize`` None leaves it to the model.
    async def embed(
        self, prompt_ids: TokenIds, request_id: str, normalize: bool | None = None, priority: int = 0
    ) -> Embedding: ...
    # The log-probability of each of ``label_ids`` as the next token.
    async def label_logprobs(
        self, prompt_ids: TokenIds, label_ids: Sequence[int], request_id: str, priority: int = 0
    ) -> Labelled: ...
    # The engine adds special tokens as for ``embed``.
    async def classify(self, prompt_ids: TokenIds, request_id: str, priority: int = 0) -> Classified: ...
    async def reset_prefix_cache(self) -> None: ...
    def shutdown(self) -> None: ...
