"""An engine that answers at once, for measuring the pipeline's own plumbing and for fast tests."""

from __future__ import annotations

import asyncio
import math
from array import array
from typing import Sequence

from pipeline.sampling import Sampling
from pipeline.worker.adapters import Adapters
from pipeline.worker.engine import Choice, Classified, Embedding, Generation, Labelled, TokenIds, adapter_folder
from pipeline.worker.prefix_cache_model import PrefixCacheModel


class CharTokenizer:
    """The fake engine's tokenizer for what reads answers with one (a tool-call parser): a token per
    character, and no named tokens of its own."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: Sequence[int], **_) -> str:
        return "".join(map(chr, ids))

    def get_vocab(self) -> dict[str, int]:
        return {}


class FakeEngine:
    """Answers with an empty answer, or with a row's adapter's name once its folder checks out, and tokenizes by
    characters. With ``kv_cache_tokens`` it reports the cached prompt tokens a prefix cache of that size would have
    served; with ``labels`` it serves task classify alone."""

    block_size = 16
    settings: dict = {}
    tasks: tuple[str, ...] = ("generate", "embed")
    embedding_size: int | None = 4  # the prompt's length and its first three code points, over 1000
    special_tokens = 0
    tokenizer = CharTokenizer()

    def __init__(
        self,
        latency_s: float = 0.0,
        kv_cache_tokens: int = 0,
        max_model_len: int = 2048,
        adapters: Adapters | None = None,
        labels: tuple[str, ...] | None = None,
    ):
        self.latency_s = latency_s
        self.labels = labels
        if labels:
            self.tasks = ("classify",)
        self.adapters = adapters
        self.max_model_len = max_model_len
        self.kv_cache_tokens = kv_cache_tokens
        self.cache = PrefixCacheModel(kv_cache_tokens // self.block_size, self.block_size)

    def encode(self, text: str) -> array:
        # An array of code points built in C, so joining and cache lookups need no Python int per token.
        ids = array("I")
        ids.frombytes(text.encode("utf-32-le", "surrogatepass"))
        return ids

    async def generate(
        self, prompt_ids: TokenIds, request_id: str, sampling: Sampling, priority: int = 0
    ) -> Generation:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        text = ""
        if sampling.adapter is not None:
            await adapter_folder(self.adapters, sampling.adapter)
            text = sampling.adapter
        choices = [Choice(text, 0, "stop", [] if sampling.keeps_logprobs else None)] * sampling.choices
        return Generation.of(choices, len(prompt_ids), self.cache.serve(prompt_ids))

    async def embed(
        self, prompt_ids: TokenIds, request_id: str, normalize: bool | None = None, priority: int = 0
    ) -> Embedding:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        import numpy as np

        head = list(prompt_ids[:3]) + [0] * (3 - min(3, len(prompt_ids)))
        vector = np.array([len(prompt_ids), *head], np.float32) / 1000
        if normalize is not False:
            vector /= max(float(np.linalg.norm(vector)), 1e-12)
        return Embedding(vector, len(prompt_ids))

    async def label_logprobs(
        self, prompt_ids: TokenIds, label_ids: Sequence[int], request_id: str, priority: int = 0
    ) -> Labelled:
        """Deterministic: the label the prompt names most is the likeliest."""
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        ids = list(prompt_ids)
        weights = [1 + ids.count(t) for t in label_ids]
        total = sum(weights)
        return Labelled([math.log(w / total) for w in weights], len(ids), self.cache.serve(prompt_ids))

    async def classify(self, prompt_ids: TokenIds, request_id: str, priority: int = 0) -> Classified:
        """Deterministic: the label the text names most is the likeliest."""
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        assert self.labels is not None
        text = "".join(map(chr, prompt_ids))
        counts = [text.count(label) for label in self.labels]
        weights = [math.exp(c - max(counts)) for c in counts]
        return Classified([w / sum(weights) for w in weights], len(prompt_ids))

    async def reset_prefix_cache(self) -> None:
        self.cache.reset()

    def shutdown(self) -> None:
        pass
