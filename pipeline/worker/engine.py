"""The engine behind a narrow interface: what a worker asks of it and what it answers.

Two engines serve it: ``VllmEngine`` (pipeline/worker/vllm_engine.py) wraps vLLM's ``AsyncLLM``;
``FakeEngine`` (pipeline/worker/fake_engine.py) answers at once, to measure the pipeline's own
plumbing and in unit tests of routing and transport.
"""

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
    """The engine cannot serve any more requests (e.g. its engine-core process died)."""


class BadSampling(ValueError):
    """The engine refused a request's sampling settings; the message says which."""


def adapters_of(config: Config) -> Adapters | None:
    """The shard's adapters (None where the engines run without LoRA: ``engine.max_loras`` 0)."""
    if not config.lora_slots:
        return None
    return Adapters(config.model.adapters, config.model.cache_path, config.engine.max_lora_rank, config.storage_options)


async def adapter_folder(adapters: Adapters | None, adapter: str) -> str:
    """A row's adapter's local folder; ``BadSampling`` (the row's error) where it cannot be used."""
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
    """One of a request's answers (``sampling.n`` of them)."""

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
    logprobs: list[dict] | None = None  # the (first) answer's, when asked for
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
    """The log-probability of each label's first token as the prompt's next token (the model's
    whole vocabulary considered), in the labels' order."""

    logprobs: list[float]
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int = 0


@dataclass
class Embedding:
    vector: Sequence[float] | np.ndarray  # float32 values (a numpy array from vLLM)
    prompt_tokens: int


@dataclass
class Classified:
    """A classification model's probability of each of its labels (its head's logits, softmaxed)."""

    probs: Sequence[float]
    prompt_tokens: int


class TokenIds(Protocol):
    """A text's token ids as an engine gives them (``Engine.encode``): a list, or any sequence of ints that
    ``+`` joins and slicing cuts into its own kind (the fake engine's ``array("I")``)."""

    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[int]: ...
    @overload
    def __getitem__(self, index: SupportsIndex, /) -> int: ...
    @overload
    def __getitem__(self, index: slice, /) -> Self: ...
    def __add__(self, other: Self, /) -> Self: ...


class Engine(Protocol):
    block_size: int  # tokens per KV-cache block (the prefix cache's unit)
    kv_cache_tokens: int  # tokens the engine's KV cache holds
    max_model_len: int  # the longest prompt (with its answer) the engine takes
    tasks: tuple[str, ...]  # what it serves: "generate" and/or "embed", or "classify" (a classification model)
    labels: tuple[str, ...] | None  # a classification model's labels, in its head's order
    embedding_size: int | None  # an embedding's values (an embedding engine's)
    special_tokens: int  # the tokens ``embed`` adds to a text (BERT's [CLS] and [SEP])
    settings: dict  # the engine's effective settings, as plain values (the bench compares them)
    tokenizer: Any  # the model's tokenizer, for what reads the answers with it (a tool-call parser)

    def encode(self, text: str) -> TokenIds: ...
    # ``priority``: lower first, among the requests waiting inside the engine (pipeline/worker/admission.py)
    async def generate(
        self, prompt_ids: TokenIds, request_id: str, sampling: Sampling, priority: int = 0
    ) -> Generation: ...
    # an embedding of the text ``prompt_ids`` holds (without the model's special tokens, which the
    # engine adds); ``normalize``: to length 1 (None: as the model defines)
    async def embed(
        self, prompt_ids: TokenIds, request_id: str, normalize: bool | None = None, priority: int = 0
    ) -> Embedding: ...
    # the log-probability of each of ``label_ids`` as the next token after ``prompt_ids`` (one step)
    async def label_logprobs(
        self, prompt_ids: TokenIds, label_ids: Sequence[int], request_id: str, priority: int = 0
    ) -> Labelled: ...
    # a classification model's label probabilities for the text ``prompt_ids`` holds (special tokens
    # added by the engine, as ``embed``'s)
    async def classify(self, prompt_ids: TokenIds, request_id: str, priority: int = 0) -> Classified: ...
    async def reset_prefix_cache(self) -> None: ...
    def shutdown(self) -> None: ...
