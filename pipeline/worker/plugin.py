"""The worker side: a Dask WorkerPlugin that owns one resident engine per worker,
and the task function that feeds it.

Life cycle: the engine is built once, off the event loop, when the plugin is set
up; then ``gc.collect()`` + ``gc.freeze()`` move the start-up heap out of the
collector's way. A cluster job's answer task hands its bucket's rows to ``answer_grouped``
(pipeline/worker/grouped_answers.py); the engine takes them in turn, bounded by
``intake.max_in_flight`` requests per worker, shared fairly by the jobs
(pipeline/worker/admission.py).
"""
from __future__ import annotations

import asyncio
import atexit
import gc
import logging
import os
import sys
import time
from typing import Awaitable, Callable, TypeVar, cast

from distributed import Worker, WorkerPlugin, get_worker
from tornado.ioloop import PeriodicCallback

from pipeline import engine_env
from pipeline.config import Config
from pipeline.config.shards import ShardConfig
from pipeline.names import ENGINE_DIED_TOPIC, PLUGIN_NAME, PUBLISH_INTERVAL_S, SHARD_ENV, SNAPSHOT_TOPIC
from pipeline.prefix_memory import PrefixMemory
from pipeline.results import ErrorKind, RowResult
from pipeline.sampling import Sampling, check_answer
from pipeline.worker import metrics, reaper
from pipeline.worker.admission import FairAdmission, TokenGate
from pipeline.worker.engine import BadSampling, Engine, EngineDead, TokenIds, adapters_of
from pipeline.worker.gcstats import GcPauses
from pipeline.worker.grouped_answers import answer_grouped
from pipeline.worker.prompt_fit import fit_prompt, fit_text
from pipeline.worker.row_results import answer_text, choice_entry, labelled
from tasks.classify import head_probs, label_probs

logger = logging.getLogger(__name__)


class TaskReleased(RuntimeError):
    """Dask released a task while its rows were being answered: they were stopped."""


LET_GO = ("released", "cancelled", "forgotten")   # a Dask task's states once nobody waits for it
Out = TypeVar("Out")   # an engine call's output


class EnginePlugin(WorkerPlugin):
    idempotent = True  # registering again must not rebuild a loaded engine
    name = PLUGIN_NAME

    def __init__(self, config: Config, model: str, engine_kind: str = "vllm"):
        self.config = config
        self.model = model
        self.engine_kind = engine_kind
        self.engine: Engine | None = None
        self.worker: Worker | None = None   # the Dask worker (set up)
        self.info: dict = {}
        self.prefixes: PrefixMemory | None = None   # what the engine has served (set once it runs)
        self.phase = "waiting"       # starting -> ready -> stopped (or failed)
        self.phase_since = time.time()
        self.error: str | None = None   # why the engine did not start
        self._answering: dict[str, asyncio.Task] = {}   # a Dask task's key -> its rows being answered
        self._label_ids: dict[tuple[str, ...], list[int]] = {}   # labels -> each one's first token (task classify)

    def _set_phase(self, phase: str) -> None:
        self.phase, self.phase_since = phase, time.time()

    async def setup(self, worker) -> None:
        self.worker = worker
        self.shard = os.environ.get(SHARD_ENV) or str(worker.name)
        self._set_phase("starting")
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        # Building takes seconds; keep the worker's event loop (heartbeats) free.
        try:
            self.engine = await loop.run_in_executor(None, self._build_engine)
        except BaseException as exc:
            self._set_phase("failed")
            self.error = f"{type(exc).__name__}: {exc}"
            # No engine runs: this process ends without finalizing too, or a loaded machine takes
            # seconds to tear down vLLM's and torch's modules and the nanny kills it with a warning
            # on the user's terminal.
            self._guard_exit(engine_stopped=True)
            raise
        start_s = time.perf_counter() - t0
        self._guard_exit(engine_stopped=False)
        # What does not change while the engine runs; the counters live in self.metrics.
        self.info = {"shard": self.shard, "pid": os.getpid(), "block_size": self.engine.block_size,
                     "kv_cache_tokens": self.engine.kv_cache_tokens, "engine_settings": self.engine.settings,
                     "tasks": list(self.engine.tasks), "embedding_size": self.engine.embedding_size}
        self._intake = FairAdmission(self.config.intake.max_in_flight)   # shared fairly by the jobs
        budget = self.config.intake.kv_budget_share * (self.engine.kv_cache_tokens or 0)
        self.token_gate = TokenGate(budget) if budget else None   # cluster jobs' grouped answering
        self.prefixes = self._prefix_memory(self.engine)
        gc.collect()
        gc.freeze()  # the start-up heap (engine, tokenizer, modules) is never scanned again
        self.gc_pauses = GcPauses().install()
        self.metrics = metrics.ShardMetrics(self.shard, self.gc_pauses)
        self.metrics.engine_builds = 1
        self.metrics.engine_start_s = start_s
        self._collector = metrics.install(self.metrics)
        self._dead = False
        self._publisher = PeriodicCallback(self._publish, PUBLISH_INTERVAL_S * 1000)
        self._publisher.start()
        self._set_phase("ready")

    def _guard_exit(self, engine_stopped: bool) -> None:
        """Once the engine is built (or failed to build): if this worker is killed outright, the
        engine processes it has now must not live on (the reaper); and at its exit, once no
        engine runs, it ends without finalizing (``_exit_without_finalizing``; registered after
        vLLM's imports, so it runs first)."""
        self._reaper = reaper.start(os.getpid(), reaper.engine_children())
        self._engine_stopped = engine_stopped
        atexit.register(self._exit_without_finalizing)

    def _prefix_memory(self, engine: Engine) -> PrefixMemory:
        """Bounded by the engine's KV cache (the fake engine, which has none, by the router's
        own bound, in the engine's blocks, split over the shards)."""
        cap = engine.kv_cache_tokens or self.config.routing.max_blocks * engine.block_size // len(self.config.shards)
        return PrefixMemory(max(1, cap))

    def _build_engine(self) -> Engine:
        """The engine, its processes spawned without the variables Dask's nanny gave this
        worker (pipeline/engine_env.py); the shard's own variables always reach them."""
        shard = self.config.shard(self.shard)
        keep = shard.worker_env() if shard is not None else {}
        with engine_env.engine_environment(keep) as held:
            if held:
                logger.info("shard %s: engine started without Dask's worker variables %s", self.shard, sorted(held))
            return build_engine(self.engine_kind, self.model, self.config, shard)

    def _publish(self) -> None:
        """Send the shard's figures to the scheduler while it works, and once more when it
        stops (an idle worker sends nothing)."""
        snap = self.metrics.snapshot()
        same = {k: v for k, v in snap.items() if k != "time"}
        if snap["queued"] or snap["in_flight"] or same != getattr(self, "_published", None):
            self._published = same
            assert self.worker is not None   # (published from ``setup`` on)
            self.worker.log_event(SNAPSHOT_TOPIC, snap)

    async def teardown(self, worker) -> None:
        if getattr(self, "_publisher", None) is not None:
            self._publisher.stop()
            metrics.uninstall(self._collector)
        await self.stop_engine()

    async def stop_engine(self) -> None:
        """Shut the engine down (its engine-core process exits cleanly); a no-op once done."""
        if self.engine is not None:
            engine, self.engine = self.engine, None
            await asyncio.get_running_loop().run_in_executor(None, engine.shutdown)
            self._engine_stopped = True
            self._set_phase("stopped")

    def _exit_without_finalizing(self) -> None:
        """At the exit of a worker whose engine was stopped cleanly: end the process now.
        Finalizing the interpreter only makes the native bindings vLLM loads (triton's) print
        dozens of "nanobind: leaked ..." lines per worker; there is nothing left to clean up."""
        if self._engine_stopped:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    async def answer_grouped(self, rows, bucket_id: str, sampling: Sampling, truncate: bool,
                             progress=None, task: str | None = None, **commit) -> list[RowResult]:
        """Rows answered grouped by document (pipeline/worker/grouped_answers.py): a cluster
        job's bucket. ``task``: the key of the Dask task asking; if Dask
        releases it meanwhile (its client cancelled it or is gone), the rows stop there: the
        requests in flight are aborted and no more start (``transition``)."""
        self._running()
        answering = asyncio.ensure_future(answer_grouped(self, rows, bucket_id, sampling, truncate, progress,
                                                         **commit))
        if task is not None:
            self._answering[task] = answering
            if self._released(task):   # (released before it got here: ``transition`` found nothing to stop)
                answering.cancel()
        try:
            results = await answering
        except EngineDead as exc:
            self._engine_died(exc)
            raise EngineDead(f"shard {self.shard}: {exc}; the worker restarts with a fresh engine") from None
        except asyncio.CancelledError:
            if (current := asyncio.current_task()) is not None and current.cancelling():   # (this worker is closing)
                raise
            raise TaskReleased(f"shard {self.shard}: stopped answering {bucket_id}: Dask released task {task} "
                               f"(its client cancelled it or is gone)") from None
        finally:
            if task is not None and self._answering.get(task) is answering:
                del self._answering[task]
        self.metrics.batches += 1
        return results

    def transition(self, key, start, finish, **kwargs) -> None:
        """(Dask calls this on every task transition on this worker.) A task released while it
        answers rows: they stop (``answer_grouped``), rather than take the engine from the
        other jobs until the last of them is answered for nobody."""
        if finish in LET_GO:
            answering = self._answering.get(key)
            if answering is not None:
                answering.cancel()

    def _running(self) -> Engine:
        """The engine, or the error that it is not running (stopped, or not yet started)."""
        if self.engine is None:
            raise RuntimeError(f"shard {self.shard}: engine is not running")
        return self.engine

    def _released(self, key: str) -> bool:
        """Dask has let task ``key`` go on this worker (cancelled while it was starting, or gone)."""
        tasks = getattr(getattr(self.worker, "state", None), "tasks", None)
        if tasks is None:   # (no Dask worker: nothing to ask)
            return False
        ts = tasks.get(key)
        return ts is None or ts.state in LET_GO

    async def answer_row(self, job: str, batch_id: str, index: int, prefix_ids: TokenIds, suffix: str,
                         truncate: bool, sampling: Sampling) -> RowResult:
        """Row ``index`` (its position in the job): its prompt is its prefix's tokens, then its
        suffix's. It waits for ``job``'s turn at the engine (pipeline/worker/admission.py)."""
        engine = self._running()
        ids, error = fit_prompt(prefix_ids, engine.encode(suffix), engine.max_model_len,
                                sampling.max_tokens or self.config.sampling.max_tokens, truncate)
        if error is not None:
            return RowResult.failed(index, ErrorKind.INPUT, error, shard=self.shard)
        gen, t0 = await self._at_engine(job, ids, lambda priority: self._running().generate(
            ids, request_id=f"{batch_id}-{index}", sampling=sampling, priority=priority))
        if isinstance(gen, RowResult):
            gen.index = index
            return gen
        answer = answer_text(gen.text, sampling)
        result = RowResult(index, answer=answer, prompt_tokens=gen.prompt_tokens,
                           cached_tokens=gen.cached_tokens, completion_tokens=gen.completion_tokens, shard=self.shard,
                           latency_s=time.perf_counter() - t0, finish_reason=gen.finish_reason, logprobs=gen.logprobs)
        if gen.choices is not None:
            checked = [(c, *check_answer(answer_text(c.text, sampling), sampling, c.finish_reason == "length"))
                       for c in gen.choices]
            result.choices = [choice_entry(c, answer_text(c.text, sampling), parsed, problem)
                              for c, parsed, problem in checked]
            result.answer_json = result.choices[0]["answer_json"]
            problems = [problem for _, _, problem in checked if problem is not None]
            if len(problems) == len(checked):   # (a row fails when no answer is usable)
                result.fail(ErrorKind.OUTPUT, problems[0])
        elif sampling.json_schema is not None:
            result.answer_json, problem = check_answer(answer, sampling, gen.finish_reason == "length")
            if problem is not None:
                result.fail(ErrorKind.OUTPUT, problem)
        return result

    async def embed_row(self, job: str, batch_id: str, index: int, prefix_ids: TokenIds, suffix: str, truncate: bool,
                        sampling: Sampling) -> RowResult:
        """Row ``index``'s embedding: its text is its prefix's tokens, then its suffix's (a template's
        text after its prefix column), cut to what the model takes when ``truncate``; it waits for
        ``job``'s turn at the engine, as ``answer_row`` does."""
        out, t0 = await self._on_text(job, batch_id, index, prefix_ids, suffix, truncate, lambda ids, rid, priority:
                                      self._running().embed(ids, request_id=rid, normalize=sampling.normalize,
                                                            priority=priority))
        if isinstance(out, RowResult):
            return out
        assert t0 is not None   # (None only with a failed result)
        return RowResult(index, embedding=out.vector, prompt_tokens=out.prompt_tokens, shard=self.shard,
                         latency_s=time.perf_counter() - t0)

    async def classify_row(self, job: str, batch_id: str, index: int, prefix_ids: TokenIds, suffix: str,
                           truncate: bool, labels: tuple[str, ...]) -> RowResult:
        """Row ``index``'s labels weighed (task classify / score): the probability of each label's first
        token as the answer's first token after the row's prompt, normalised over the labels -- or, on a
        classification model, its head's probabilities (``_head``); the likeliest label, and the first
        label's probability as the row's score. It waits for ``job``'s turn at the engine, as ``answer_row`` does."""
        engine = self._running()
        if "classify" in engine.tasks:
            return await self._head(job, batch_id, index, prefix_ids, suffix, truncate, labels)
        label_ids = self._label_ids.get(labels)
        if label_ids is None:
            label_ids = self._label_ids[labels] = [engine.encode(label)[0] for label in labels]
        ids, error = fit_prompt(prefix_ids, engine.encode(suffix), engine.max_model_len, 1, truncate)
        if error is not None:
            return RowResult.failed(index, ErrorKind.INPUT, error, shard=self.shard)
        out, t0 = await self._at_engine(job, ids, lambda priority: engine.label_logprobs(
            ids, label_ids, request_id=f"{batch_id}-{index}", priority=priority))
        if isinstance(out, RowResult):
            out.index = index
            return out
        return labelled(index, labels, label_probs(out.logprobs), out, self.shard, t0)

    async def _head(self, job: str, batch_id: str, index: int, prefix_ids: TokenIds, suffix: str, truncate: bool,
                    labels: tuple[str, ...]) -> RowResult:
        """Row ``index``'s text (as ``embed_row``'s) classified by the model's own head: ``labels``' probabilities."""
        out, t0 = await self._on_text(job, batch_id, index, prefix_ids, suffix, truncate, lambda ids, rid, priority:
                                      self._running().classify(ids, request_id=rid, priority=priority))
        if isinstance(out, RowResult):
            return out
        head = self._running().labels
        assert head is not None and t0 is not None   # (a classification model has labels; t0 is None only on failure)
        return labelled(index, labels, head_probs(out.probs, head, labels), out, self.shard, t0)

    async def _on_text(self, job: str, batch_id: str, index: int, prefix_ids: TokenIds, suffix: str, truncate: bool,
                       call: Callable[[TokenIds, str, int], Awaitable[Out]]) -> tuple[Out | RowResult, float | None]:
        """Row ``index``'s text -- its prefix's tokens, then its suffix's, cut to what the model takes
        when ``truncate`` -- handed to ``call(ids, request_id, priority)`` at ``job``'s turn at the
        engine: (the engine's output, its start time), or (the row's failed result, None)."""
        engine = self._running()
        ids = prefix_ids + engine.encode(suffix) if suffix else prefix_ids
        ids, error = fit_text(ids, engine.max_model_len - engine.special_tokens, truncate)
        if error is not None:
            return RowResult.failed(index, ErrorKind.INPUT, error, shard=self.shard), None
        out, t0 = await self._at_engine(job, ids, lambda priority: call(ids, f"{batch_id}-{index}", priority))
        if isinstance(out, RowResult):
            out.index = index
        return out, t0

    async def _at_engine(self, job: str, ids: TokenIds,
                         request: Callable[[int], Awaitable[Out]]) -> tuple[Out | RowResult, float]:
        """``request(priority)`` (an engine call for prompt ``ids``) once it is ``job``'s turn at
        the engine (pipeline/worker/admission.py), counted in the shard's figures: its output and
        when it started; or, where the engine refused or failed the request, the row's failed
        result (its index to be set) instead of the output."""
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
            aborted = True   # (its task was released: vLLM aborts the request)
            raise
        except EngineDead:
            raise
        except Exception as exc:  # one failed request must not fail its batch
            # vLLM checks sampling values when the request is made: a bad one is the row's
            kind = ErrorKind.INPUT if _bad_request(exc) else ErrorKind.ENGINE
            why = str(exc) if isinstance(exc, BadSampling) else f"{type(exc).__name__}: {exc}"   # (ours says it all)
            return RowResult.failed(-1, kind, why, prompt_tokens=len(ids),
                                    shard=self.shard, latency_s=time.perf_counter() - t0), t0
        finally:
            self._intake.release(job)
            if aborted:
                m.abort(len(ids))
            else:
                m.finish(len(ids), getattr(out, "cached_tokens", 0), getattr(out, "completion_tokens", 0), out is None)
        return out, t0

    def _engine_died(self, exc: Exception) -> None:
        """The engine can serve nothing more: say so, then restart this worker process (its
        nanny starts a fresh one, which builds a fresh engine; the reaper stops what is left
        of the old engine). Without a nanny the worker just leaves, and the client re-routes
        its shard's rows once ``recovery.rejoin_timeout_s`` has passed."""
        if self._dead:
            return
        self._dead = True
        logger.error("shard %s: engine died (%s); restarting the worker", self.shard, exc)
        assert self.worker is not None   # (set up: the engine ran)
        self.worker.log_event(ENGINE_DIED_TOPIC, {"shard": self.shard, "error": str(exc)})
        self.worker.loop.add_callback(self.worker.close, nanny=False, reason=f"pipeline: engine died: {exc}")


def build_engine(kind: str, model: str, config: Config, shard: ShardConfig | None = None) -> Engine:
    if kind == "vllm":
        from pipeline.worker.vllm_engine import VllmEngine

        return VllmEngine(model, config, shard)
    if kind == "fake":
        from pipeline.classifier_model import classifier_labels
        from pipeline.worker.fake_engine import FakeEngine

        return FakeEngine(config.engine.null_latency_s, config.engine.null_kv_cache_tokens,
                          config.engine.max_model_len, adapters_of(config), classifier_labels(model))
    raise ValueError(f"unknown engine kind {kind!r}; use vllm or fake")


def _bad_request(exc: Exception) -> bool:
    """vLLM refused the request's settings (a value out of range, a schema it cannot compile)."""
    return isinstance(exc, BadSampling) or any(c.__name__ == "VLLMClientError" for c in type(exc).__mro__)


def shard_plugin() -> EnginePlugin:
    worker = get_worker()
    try:
        return cast(EnginePlugin, worker.plugins[PLUGIN_NAME])   # (registered by pipeline/cluster/engines.py)
    except KeyError:
        raise RuntimeError(f"worker {worker.name} has no engine plugin; was the pipeline started?") from None
