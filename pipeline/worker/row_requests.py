"""The engine plugin's row requests: a row's prompt fitted to the model and sent to the engine at its job's turn. A
request the engine refuses or fails becomes the row's error, not its batch's."""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, TypeVar

import msgspec

from pipeline.config import Config
from pipeline.results import ErrorKind, RowResult
from pipeline.sampling import Sampling
from pipeline.worker.admission import FairAdmission
from pipeline.worker.engine import BadSampling, Engine, EngineDead, TokenIds
from pipeline.worker.metrics import ShardMetrics
from pipeline.worker.prompt_fit import fit_prompt, fit_text
from pipeline.worker.row_results import answered, labelled
from pipeline.worker.tool_calls import AutoTools
from tasks.classify import head_probs, label_probs

Out = TypeVar("Out")  # an engine call's output
Labels = tuple[str, ...]  # a classify row's labels


class RowRequests:
    """What the plugin's row methods need of it, set when its engine starts."""

    config: Config
    engine: Engine | None
    shard: str
    metrics: ShardMetrics
    _intake: FairAdmission
    _label_ids: dict[Labels, list[int]]

    def _running(self) -> Engine:
        if self.engine is None:
            raise RuntimeError(f"shard {self.shard}: engine is not running")
        return self.engine

    async def answer_row(
        self, job: str, batch_id: str, index: int, prefix_ids: TokenIds, suffix: str, truncate: bool, sampling: Sampling
    ) -> RowResult:
        """Row ``index``'s prompt is its prefix's tokens, then its suffix's. A tool_choice "auto" row's answer is
        read by its tool-call parser."""
        engine = self._running()
        tools = None
        if sampling.tool_parser is not None and sampling.tools is not None:
            try:
                tools = AutoTools(sampling.tool_parser, sampling.tools, engine.tokenizer)
            except Exception as exc:  # noqa: BLE001 - a parser refuses a tokenizer its own way (RuntimeError, ValueError)
                parser, why = sampling.tool_parser, f"{type(exc).__name__}: {exc}"
                problem = f"engine.tool_call_parser {parser!r} cannot read this model's answers: {why}"
                return RowResult.failed(index, ErrorKind.ENGINE, problem, shard=self.shard)
            if tools.keeps_special_tokens:
                sampling = msgspec.structs.replace(sampling, keep_special_tokens=True)
        max_tokens = sampling.max_tokens or self.config.sampling.max_tokens
        ids, error = fit_prompt(prefix_ids, engine.encode(suffix), engine.max_model_len, max_tokens, truncate)
        if error is not None:
            return RowResult.failed(index, ErrorKind.INPUT, error, shard=self.shard)
        rid = f"{batch_id}-{index}"
        gen, t0 = await self._at_engine(
            job, index, ids, lambda priority: self._running().generate(ids, rid, sampling, priority)
        )
        if isinstance(gen, RowResult):
            return gen
        return answered(index, gen, sampling, tools, self.shard, t0)

    async def embed_row(
        self, job: str, batch_id: str, index: int, prefix_ids: TokenIds, suffix: str, truncate: bool, sampling: Sampling
    ) -> RowResult:
        """Embeds the row's text, cut to what the model takes when ``truncate``."""
        ids, error = self._fit_text(prefix_ids, suffix, truncate)
        if error is not None:
            return RowResult.failed(index, ErrorKind.INPUT, error, shard=self.shard)
        rid = f"{batch_id}-{index}"
        out, t0 = await self._at_engine(
            job, index, ids, lambda priority: self._running().embed(ids, rid, sampling.normalize, priority)
        )
        if isinstance(out, RowResult):
            return out
        latency_s = time.perf_counter() - t0
        return RowResult(
            index, embedding=out.vector, prompt_tokens=out.prompt_tokens, shard=self.shard, latency_s=latency_s
        )

    async def classify_row(
        self, job: str, batch_id: str, index: int, prefix_ids: TokenIds, suffix: str, truncate: bool, labels: Labels
    ) -> RowResult:
        """Weighs ``labels`` by the probability of each label's first token as the answer's first token, normalised
        over the labels; a classification model uses its own head instead, on the row's text. The likeliest label is
        the answer and the first label's probability the score."""
        engine, rid = self._running(), f"{batch_id}-{index}"
        if "classify" in engine.tasks:
            ids, error = self._fit_text(prefix_ids, suffix, truncate)
            if error is not None:
                return RowResult.failed(index, ErrorKind.INPUT, error, shard=self.shard)
            out, t0 = await self._at_engine(
                job, index, ids, lambda priority: self._running().classify(ids, rid, priority)
            )
            if isinstance(out, RowResult):
                return out
            head = self._running().labels
            assert head is not None
            return labelled(index, labels, head_probs(out.probs, head, labels), out, self.shard, t0)
        label_ids = self._label_ids.get(labels)
        if label_ids is None:
            label_ids = self._label_ids[labels] = [engine.encode(label)[0] for label in labels]
        ids, error = fit_prompt(prefix_ids, engine.encode(suffix), engine.max_model_len, 1, truncate)
        if error is not None:
            return RowResult.failed(index, ErrorKind.INPUT, error, shard=self.shard)
        logprobs, t0 = await self._at_engine(
            job, index, ids, lambda priority: engine.label_logprobs(ids, label_ids, rid, priority)
        )
        if isinstance(logprobs, RowResult):
            return logprobs
        return labelled(index, labels, label_probs(logprobs.logprobs), logprobs, self.shard, t0)

    def _fit_text(self, prefix_ids: TokenIds, suffix: str, truncate: bool) -> tuple[TokenIds, str | None]:
        """The row's text to embed or classify with a head, cut to what the model takes when ``truncate``."""
        engine = self._running()
        ids = prefix_ids + engine.encode(suffix) if suffix else prefix_ids
        return fit_text(ids, engine.max_model_len - engine.special_tokens, truncate)

    async def _at_engine(
        self, job: str, index: int, ids: TokenIds, request: Callable[[int], Awaitable[Out]]
    ) -> tuple[Out | RowResult, float]:
        """Runs ``request(priority)`` at ``job``'s turn, counted in the shard's figures, and returns its output and
        start time. Where the engine refuses or fails it, the output is row ``index``'s failed result."""
        m = self.metrics
        m.queue(len(ids))
        try:
            priority = await self._intake.acquire(job)
        except BaseException:
            m.queued -= 1
            m.prefill_outstanding -= len(ids)
            raise
        m.admit()
        t0 = time.perf_counter()
        out = None
        aborted = False
        try:
            out = await request(priority)
        except asyncio.CancelledError:
            aborted = True  # its task was released: vLLM aborts the request
            raise
        except EngineDead:
            raise
        except Exception as exc:  # one failed request must not fail its batch
            # vLLM checks sampling values when the request is made, so a bad one is the row's error.
            kind = ErrorKind.INPUT if _bad_request(exc) else ErrorKind.ENGINE
            why = str(exc) if isinstance(exc, BadSampling) else f"{type(exc).__name__}: {exc}"  # ours says it all
            return RowResult.failed(
                index, kind, why, prompt_tokens=len(ids), shard=self.shard, latency_s=time.perf_counter() - t0
            ), t0
        finally:
            self._intake.release(job)
            if aborted:
                m.abort(len(ids))
            else:
                m.finish(len(ids), getattr(out, "cached_tokens", 0), getattr(out, "completion_tokens", 0), out is None)
        return out, t0


def _bad_request(exc: Exception) -> bool:
    """vLLM refused the request's settings, such as a value out of range or a schema it cannot compile."""
    return isinstance(exc, BadSampling) or any(c.__name__ == "VLLMClientError" for c in type(exc).__mro__)
