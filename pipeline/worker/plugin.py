"""A Dask WorkerPlugin that owns one resident engine per worker and answers cluster jobs' buckets on it.

The engine is built once, off the event loop, when the plugin is set up; then ``gc.freeze()`` moves the start-up
heap out of the collector's way."""

from __future__ import annotations

import asyncio
import atexit
import gc
import logging
import os
import sys
import time
from typing import cast

from distributed import Worker, WorkerPlugin, get_worker
from tornado.ioloop import PeriodicCallback

from pipeline import engine_env
from pipeline.config import Config
from pipeline.config.shards import ShardConfig
from pipeline.names import ENGINE_DIED_TOPIC, PLUGIN_NAME, PUBLISH_INTERVAL_S, SHARD_ENV, SNAPSHOT_TOPIC
from pipeline.prefix_memory import PrefixMemory
from pipeline.results import RowResult
from pipeline.sampling import Sampling
from pipeline.worker import metrics, reaper
from pipeline.worker.admission import FairAdmission, TokenGate
from pipeline.worker.engine import Engine, EngineDead, adapters_of
from pipeline.worker.gcstats import GcPauses
from pipeline.worker.grouped_answers import answer_grouped
from pipeline.worker.row_requests import RowRequests

logger = logging.getLogger(__name__)


class TaskReleased(RuntimeError):
    """Dask released a task while its rows were being answered."""


LET_GO = ("released", "cancelled", "forgotten")  # a Dask task's states once nobody waits for it


class EnginePlugin(RowRequests, WorkerPlugin):
    idempotent = True  # registering again must not rebuild a loaded engine
    name = PLUGIN_NAME

    def __init__(self, config: Config, model: str, engine_kind: str = "vllm"):
        self.config = config
        self.model = model
        self.engine_kind = engine_kind
        self.engine: Engine | None = None
        self.worker: Worker | None = None  # the Dask worker (set up)
        self.info: dict = {}
        self.prefixes: PrefixMemory | None = None  # what the engine has served (set once it runs)
        self.phase = "waiting"  # starting -> ready -> stopped (or failed)
        self.phase_since = time.time()
        self.error: str | None = None  # why the engine did not start
        self._answering: dict[str, asyncio.Task] = {}  # a Dask task's key -> its rows being answered
        self._label_ids: dict[tuple[str, ...], list[int]] = {}  # labels -> each one's first token (task classify)

    def _set_phase(self, phase: str) -> None:
        self.phase, self.phase_since = phase, time.time()

    async def setup(self, worker) -> None:
        self.worker = worker
        self.shard = os.environ.get(SHARD_ENV) or str(worker.name)
        self._set_phase("starting")
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        # Building takes seconds; keep the event loop free for heartbeats.
        try:
            engine = self.engine = await loop.run_in_executor(None, self._build_engine)
        except BaseException as exc:
            self._set_phase("failed")
            self.error = f"{type(exc).__name__}: {exc}"
            # Exit without finalizing: tearing down vLLM's and torch's modules can take long enough for the nanny to
            # kill the process with a warning on the user's terminal.
            self._guard_exit(engine_stopped=True)
            raise
        start_s = time.perf_counter() - t0
        self._guard_exit(engine_stopped=False)
        # What does not change while the engine runs; the counters live in self.metrics.
        self.info = {
            "shard": self.shard,
            "pid": os.getpid(),
            "block_size": engine.block_size,
            "kv_cache_tokens": engine.kv_cache_tokens,
            "engine_settings": engine.settings,
            "tasks": list(engine.tasks),
            "embedding_size": engine.embedding_size,
        }
        self._intake = FairAdmission(self.config.intake.max_in_flight)  # shared fairly by the jobs
        budget = self.config.intake.kv_budget_share * (engine.kv_cache_tokens or 0)
        self.token_gate = TokenGate(budget) if budget else None  # cluster jobs' grouped answering
        # Bounded by the engine's KV cache, or for the fake engine by the router's bound split over the shards.
        cap = engine.kv_cache_tokens or self.config.routing.max_blocks * engine.block_size // len(self.config.shards)
        self.prefixes = PrefixMemory(max(1, cap))
        gc.collect()
        gc.freeze()  # the start-up heap is never scanned again
        self.gc_pauses = GcPauses().install()
        self.metrics = metrics.ShardMetrics(self.shard, self.gc_pauses)
        self.metrics.engine_builds = 1
        self.metrics.engine_start_s = start_s
        metrics.install(self.metrics)
        self._dead = False
        self._publisher = PeriodicCallback(self._publish, PUBLISH_INTERVAL_S * 1000)
        self._publisher.start()
        self._set_phase("ready")

    def _guard_exit(self, engine_stopped: bool) -> None:
        """Starts the reaper, so the engine's processes die with this worker even if it is killed outright, and
        registers the quick exit after vLLM's imports so it runs before their hooks."""
        self._reaper = reaper.start(os.getpid(), reaper.engine_children())
        self._engine_stopped = engine_stopped
        atexit.register(self._exit_without_finalizing)

    def _build_engine(self) -> Engine:
        """Spawns the engine without the variables Dask's nanny gave this worker; the shard's own variables still
        reach it."""
        shard = self.config.shard(self.shard)
        keep = shard.worker_env() if shard is not None else {}
        with engine_env.engine_environment(keep) as held:
            if held:
                logger.info("shard %s: engine started without Dask's worker variables %s", self.shard, sorted(held))
            return build_engine(self.engine_kind, self.model, self.config, shard)

    def _publish(self) -> None:
        """Sends the shard's figures while it works and once more when it stops; an idle worker sends nothing."""
        snap = self.metrics.snapshot()
        same = {k: v for k, v in snap.items() if k != "time"}
        if snap["queued"] or snap["in_flight"] or same != getattr(self, "_published", None):
            self._published = same
            assert self.worker is not None
            self.worker.log_event(SNAPSHOT_TOPIC, snap)

    async def teardown(self, worker) -> None:
        if getattr(self, "_publisher", None) is not None:
            self._publisher.stop()
            metrics.uninstall(self.metrics)
        await self.stop_engine()

    async def stop_engine(self) -> None:
        """Shuts the engine down cleanly; a no-op once done."""
        if self.engine is not None:
            engine, self.engine = self.engine, None
            await asyncio.get_running_loop().run_in_executor(None, engine.shutdown)
            self._engine_stopped = True
            self._set_phase("stopped")

    def _exit_without_finalizing(self) -> None:
        """Ends a cleanly stopped worker at once: finalizing would only make vLLM's native bindings print dozens of
        "nanobind: leaked" lines."""
        if self._engine_stopped:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    async def answer_grouped(
        self, rows, bucket_id: str, sampling: Sampling, truncate: bool, progress=None, task: str | None = None, **commit
    ) -> list[RowResult]:
        """Answers a cluster job's bucket. If Dask releases ``task`` meanwhile, the requests in flight are aborted
        and no more start."""
        self._running()
        answering = asyncio.ensure_future(answer_grouped(self, rows, bucket_id, sampling, truncate, progress, **commit))
        if task is not None:
            self._answering[task] = answering
            if self._released(task):  # released before it got here, so ``transition`` found nothing to stop
                answering.cancel()
        try:
            results = await answering
        except EngineDead as exc:
            self._engine_died(exc)
            raise EngineDead(f"shard {self.shard}: {exc}; the worker restarts with a fresh engine") from None
        except asyncio.CancelledError:
            if (current := asyncio.current_task()) is not None and current.cancelling():  # this worker is closing
                raise
            raise TaskReleased(
                f"shard {self.shard}: stopped answering {bucket_id}: Dask released task {task} "
                f"(its client cancelled it or is gone)"
            ) from None
        finally:
            if task is not None and self._answering.get(task) is answering:
                del self._answering[task]
        self.metrics.batches += 1
        return results

    def transition(self, key, start, finish, **kwargs) -> None:
        """Dask calls this on every task transition. A released task's rows stop, rather than hold the engine from
        other jobs for answers nobody waits for."""
        if finish in LET_GO:
            answering = self._answering.get(key)
            if answering is not None:
                answering.cancel()

    def _released(self, key: str) -> bool:
        tasks = getattr(getattr(self.worker, "state", None), "tasks", None)
        if tasks is None:  # no Dask worker
            return False
        ts = tasks.get(key)
        return ts is None or ts.state in LET_GO

    def _engine_died(self, exc: Exception) -> None:
        """Reports the dead engine and restarts this worker: its nanny starts a fresh one, and the reaper stops what
        is left of the old engine. Without a nanny the worker just leaves and the client re-routes its shard's
        rows."""
        if self._dead:
            return
        self._dead = True
        logger.error("shard %s: engine died (%s); restarting the worker", self.shard, exc)
        assert self.worker is not None
        self.worker.log_event(ENGINE_DIED_TOPIC, {"shard": self.shard, "error": str(exc)})
        self.worker.loop.add_callback(self.worker.close, nanny=False, reason=f"pipeline: engine died: {exc}")


def build_engine(kind: str, model: str, config: Config, shard: ShardConfig | None = None) -> Engine:
    if kind == "vllm":
        from pipeline.worker.vllm_engine import VllmEngine

        return VllmEngine(model, config, shard)
    if kind == "fake":
        from pipeline.classifier_model import classifier_labels
        from pipeline.worker.fake_engine import FakeEngine

        return FakeEngine(
            config.engine.null_latency_s,
            config.engine.null_kv_cache_tokens,
            config.engine.max_model_len,
            adapters_of(config),
            classifier_labels(model),
        )
    raise ValueError(f"unknown engine kind {kind!r}; use vllm or fake")


def shard_plugin() -> EnginePlugin:
    worker = get_worker()
    try:
        return cast(EnginePlugin, worker.plugins[PLUGIN_NAME])  # registered by pipeline/cluster/engines.py
    except KeyError:
        raise RuntimeError(f"worker {worker.name} has no engine plugin; was the pipeline started?") from None
