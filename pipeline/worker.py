"""The worker side: a Dask WorkerPlugin that owns one resident engine per worker,
and the task function that feeds it.

Life cycle: the engine is built once, off the event loop, when the plugin is set
up; then ``gc.collect()`` + ``gc.freeze()`` move the start-up heap out of the
collector's way. Every batch task decodes its compressed payload and admits all
its requests to the engine at once, bounded by one per-worker semaphore
(``intake.max_in_flight``) shared by all batches.
"""
from __future__ import annotations

import asyncio
import gc
import os
import time

from distributed import WorkerPlugin, get_worker

from pipeline import codec
from pipeline.config import Config
from pipeline.engine import Engine, build_engine
from pipeline.gcstats import GcPauses
from pipeline.prompt_fit import fit_prompt

PLUGIN_NAME = "pipeline-engine"


class EnginePlugin(WorkerPlugin):
    idempotent = True  # registering again must not rebuild a loaded engine
    name = PLUGIN_NAME

    def __init__(self, config: Config, model: str, engine_kind: str = "vllm"):
        self.config = config
        self.model = model
        self.engine_kind = engine_kind
        self.engine: Engine | None = None
        self.stats: dict = {}

    async def setup(self, worker) -> None:
        self.shard = os.environ.get("PIPELINE_SHARD") or str(worker.name)
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        # Building takes seconds; keep the worker's event loop (heartbeats) free.
        self.engine = await loop.run_in_executor(None, build_engine, self.engine_kind, self.model, self.config)
        self.stats = {
            "shard": self.shard,
            "pid": os.getpid(),
            "engine_builds": 1,
            "engine_start_s": time.perf_counter() - t0,
            "block_size": self.engine.block_size,
            "kv_cache_tokens": self.engine.kv_cache_tokens,
            "batches": 0,
            "requests": 0,
        }
        self._intake = asyncio.Semaphore(self.config.intake.max_in_flight)
        gc.collect()
        gc.freeze()  # the start-up heap (engine, tokenizer, modules) is never scanned again
        self.gc_pauses = GcPauses().install()

    async def teardown(self, worker) -> None:
        if self.engine is not None:
            engine, self.engine = self.engine, None
            await asyncio.get_running_loop().run_in_executor(None, engine.shutdown)

    async def run_batch(self, payload: bytes) -> bytes:
        if self.engine is None:
            raise RuntimeError(f"shard {self.shard}: engine is not running")
        batch = codec.decode_batch(payload)
        prefix_ids = [self.engine.encode(p) for p in batch.prefixes]
        results = await asyncio.gather(*(self._one(batch.batch_id, r, prefix_ids, batch.truncate_prompts)
                                         for r in batch.requests))
        self.stats["batches"] += 1
        self.stats["requests"] += len(results)
        out = codec.BatchResult(batch_id=batch.batch_id, shard=self.shard, results=list(results))
        return codec.encode(out, self.config.intake.compression_level)

    async def _one(self, batch_id: str, req: codec.Request, prefix_ids: list[list[int]],
                   truncate: bool = False) -> codec.Result:
        async with self._intake:
            t0 = time.perf_counter()
            ids, error = fit_prompt(prefix_ids[req.prefix], self.engine.encode(req.suffix),
                                    self.config.engine.max_model_len, self.config.sampling.max_tokens, truncate)
            if error is not None:
                return codec.Result(req.index, None, error, 0, 0, 0, self.shard, 0.0)
            try:
                gen = await self.engine.generate(ids, request_id=f"{batch_id}-{req.index}")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one failed request must not fail its batch
                return codec.Result(req.index, None, f"engine: {type(exc).__name__}: {exc}", len(ids), 0, 0,
                                    self.shard, time.perf_counter() - t0)
            return codec.Result(req.index, gen.text.strip(), None, gen.prompt_tokens, gen.cached_tokens,
                                gen.completion_tokens, self.shard, time.perf_counter() - t0)


def _plugin() -> EnginePlugin:
    worker = get_worker()
    try:
        return worker.plugins[PLUGIN_NAME]
    except KeyError:
        raise RuntimeError(f"worker {worker.name} has no engine plugin; was the pipeline started?") from None


async def run_batch(payload: bytes) -> bytes:
    """The Dask task: one compressed batch in, one compressed batch result out."""
    return await _plugin().run_batch(payload)


def worker_stats(dask_worker) -> dict:
    """For ``client.run``: the engine plugin's counters on this worker, with GC pauses
    since the last reset."""
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if plugin is None or not plugin.stats:
        return {}
    return {**plugin.stats, "gc": plugin.gc_pauses.summary()}


async def reset_worker(dask_worker) -> None:
    """For ``client.run``: empty the engine's prefix cache and the GC pause record."""
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if plugin is not None and plugin.engine is not None:
        await plugin.engine.reset_prefix_cache()
        plugin.gc_pauses.reset()
