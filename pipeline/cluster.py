"""Start the embedded local cluster from the config, or connect to an existing scheduler.

Uses Dask's own SpecCluster/Nanny machinery: one Nanny-managed worker process per
shard, pinned by its environment, advertising the resource ``shard-<name>`` so a
batch routed to that shard can only run there.
"""
from __future__ import annotations

import os
from pathlib import Path

import dask
from distributed import Client, Nanny, Scheduler, SpecCluster

from pipeline import engine_env
from pipeline.config import Config
from pipeline.security import dask_security, protocol

# What vLLM inside Dask workers needs (see README, "Why these Dask settings").
DASK_SETTINGS = {
    "distributed.worker.daemon": False,             # vLLM spawns its engine-core process
    "distributed.scheduler.work-stealing": False,   # stealing would break prefix affinity
    "distributed.worker.memory.target": False,
    "distributed.worker.memory.spill": False,
    "distributed.worker.memory.pause": False,
    "distributed.worker.memory.terminate": False,
    # Dask wakes every process 50 times a second to check its event loop, and every worker 100
    # times a second for its statistical profiler -- which never samples a batch anyway (batches
    # are coroutines on the event loop; Dask profiles only tasks run in its thread pool). Idle,
    # that cost 0.14 of a core across client, scheduler and 2 workers, 0.03 with these settings:
    # CPU the engines need wherever they share cores with Dask (a CPU box).
    "distributed.admin.tick.interval": "1s",
    "distributed.worker.profile.enabled": False,
}

# A worker's shard resource is plentiful: concurrency is bounded by its nthreads.
SHARD_RESOURCE_AMOUNT = 1_000_000


def apply_dask_settings() -> None:
    dask.config.set(DASK_SETTINGS)


LOG_FILE_ENV = "PIPELINE_LOG_FILE"
# Variables set only so that a worker with a log file is quiet from its first line; the
# preload removes those named here before the engine starts.
LOG_ENV_ADDED = "PIPELINE_LOG_ENV_ADDED"
QUIET_DASK = ("DASK_LOGGING__DISTRIBUTED", "warning")


def worker_specs(config: Config, log_dir: Path | None = None) -> dict:
    """Call before any nanny has started in this process: each worker's environment records
    which variables the nannies add, so its engine does not inherit them (engine_env.py).
    ``log_dir``: each worker (and its engine) writes its output to ``<shard>.log`` there
    instead of this process's terminal (the preload moves it; pipeline/preload.py)."""
    host = config.scheduler.host
    record = engine_env.worker_record()
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        for shard in config.shards:
            (log_dir / f"{shard.name}.log").write_text("")
    return {
        shard.name: {
            "cls": Nanny,
            "options": {
                "name": shard.name,
                "host": host,
                "protocol": protocol(config),
                "security": dask_security(config),
                "nthreads": config.intake.concurrent_batches,
                "memory_limit": 0,  # the engine holds its own memory; never kill for it
                "resources": {shard.resource: SHARD_RESOURCE_AMOUNT},
                "env": {**shard.worker_env(), **record,
                        **({LOG_FILE_ENV: str(log_dir / f"{shard.name}.log")} if log_dir is not None else {})},
                "dashboard": False,
                "config": DASK_SETTINGS,
                "preload": ["pipeline.preload"],
            },
        }
        for shard in config.shards
    }


def start_local_cluster(config: Config, log_dir: Path | None = None) -> SpecCluster:
    apply_dask_settings()
    quiet = {}
    if log_dir is not None and QUIET_DASK[0] not in os.environ:
        # A worker logs that it runs its preload before the preload can move its output to the
        # log file, and reads its logging levels when it imports Dask, before a nanny's ``env``
        # applies: so from the environment it is spawned with (Pipeline.start puts this
        # process's environment back once the workers run). The preload drops it again, so the
        # engine does not inherit it.
        os.environ[QUIET_DASK[0]] = QUIET_DASK[1]
        quiet = {LOG_ENV_ADDED: QUIET_DASK[0]}
    dash = config.scheduler.dashboard_address
    scheduler = {
        "cls": Scheduler,
        "options": {
            "host": config.scheduler.host,
            "port": config.scheduler.port,
            "protocol": protocol(config),
            "security": dask_security(config),
            "dashboard": dash is not None,
            # Dask's HTTP server (/metrics, /health) runs even without the dashboard: keep it on loopback too.
            "dashboard_address": dash or f"{config.scheduler.host}:0",
            "preload": ["pipeline.preload"],   # the pipeline's dashboard page
        },
    }
    workers = worker_specs(config, log_dir)
    for spec in workers.values():
        spec["options"]["env"].update(quiet)
    return SpecCluster(workers=workers, scheduler=scheduler, name="pipeline",
                       security=dask_security(config))


def connect(config: Config, log_dir: Path | None = None) -> tuple[Client, SpecCluster | None]:
    """A client for the configured cluster, and the embedded cluster if one was started.

    The nannies of an embedded cluster write Dask's worker variables into this process's
    environment before they spawn their workers; they are put back as they were once the
    workers run (``engine_env.restore``; ``Pipeline.close`` does it again after a restart)."""
    apply_dask_settings()
    security = dask_security(config)
    if config.scheduler.address:
        return Client(config.scheduler.address, security=security), None
    cluster = start_local_cluster(config, log_dir)
    try:
        return Client(cluster, security=security), cluster
    except BaseException:
        cluster.close()
        raise
