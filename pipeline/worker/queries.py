"""What a client asks each worker through ``client.run``, answered from its engine plugin."""

from __future__ import annotations

import os
import time

from pipeline.names import PLUGIN_NAME, SHARD_ENV


def worker_stats(dask_worker) -> dict:
    """The engine plugin's counters on this worker, with GC pauses since the last reset."""
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if plugin is None or not plugin.info:
        return {}
    m = plugin.metrics
    return {
        **plugin.info,
        "engine_builds": m.engine_builds,
        "engine_start_s": m.engine_start_s,
        "batches": m.batches,
        "requests": m.requests,
        "gc": plugin.gc_pauses.summary(),
        "metrics": m.snapshot(),
        "documents": len(plugin.prefixes or ()),
    }


async def stop_engine(dask_worker) -> float:
    """Stops the engine while the worker still runs, before an embedded cluster closes: Dask's nanny gives a closing
    worker 4 s, less than a vLLM engine may take to shut down. Returns the seconds it took."""
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    t0 = time.perf_counter()
    if plugin is not None:
        await plugin.stop_engine()
    return time.perf_counter() - t0


async def reset_worker(dask_worker) -> None:
    """Empties the engine's prefix cache, what the worker remembers of it, and the GC pause record."""
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if plugin is not None and plugin.engine is not None:
        await plugin.engine.reset_prefix_cache()
        if plugin.prefixes is not None:
            plugin.prefixes.clear()
        plugin.gc_pauses.reset()


def engine_phase(dask_worker) -> dict:
    """Where this worker's engine is and since when; ``{}`` on a worker serving no shard."""
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    shard = os.environ.get(SHARD_ENV)
    if plugin is None:
        return {"shard": shard, "phase": "waiting", "since": None, "pid": os.getpid()} if shard else {}
    m = getattr(plugin, "metrics", None)
    return {
        "shard": getattr(plugin, "shard", shard),
        "phase": plugin.phase,
        "since": plugin.phase_since,
        "pid": os.getpid(),
        "error": plugin.error,
        "start_s": m.engine_start_s if m is not None else None,
    }


def held_prefixes(dask_worker) -> dict:
    """The digests this worker's engine has served, least recent first."""
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if plugin is None or plugin.prefixes is None:
        return {}
    return {"shard": plugin.shard, "prefixes": plugin.prefixes.held()}
