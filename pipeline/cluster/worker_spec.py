"""One description of a shard's Dask worker, so the embedded cluster's Nanny and the resident
cluster's ``dask worker`` process start it with the same settings."""

from __future__ import annotations

import sys

from distributed import Nanny

import pipeline.compression  # registers Dask's "zlib-ng" compressor
from pipeline import engine_env
from pipeline.cluster.security import dask_security, protocol, tls_args
from pipeline.config import Config
from pipeline.config.shards import ShardConfig
from pipeline.names import ANSWER_SLOTS_RESOURCE, READ_SLOTS_RESOURCE, SHARD_RESOURCE_AMOUNT, answer_slots

# What vLLM inside Dask workers needs.
DASK_SETTINGS = {
    "distributed.worker.daemon": False,  # vLLM spawns its engine-core process
    "distributed.scheduler.work-stealing": False,  # stealing would break prefix affinity
    # Spill only by the size of the data held, never by the process's memory, which counts the engine's.
    "distributed.worker.memory.target": False,
    "distributed.worker.memory.spill": False,
    "distributed.worker.memory.pause": False,
    "distributed.worker.memory.terminate": False,
    # A slower tick and no profiler leave CPU to engines that share cores with Dask. The profiler
    # never sees a batch anyway: batches are coroutines on the event loop, not thread-pool tasks.
    "distributed.admin.tick.interval": "1s",
    "distributed.worker.profile.enabled": False,
}

WORKER_PRELOAD = "pipeline.worker.preload"
NANNY_PRELOAD = "pipeline.compression"  # a `dask worker`'s nanny connects to the scheduler too


def cluster_settings(config: Config) -> dict:
    """``DASK_SETTINGS`` with the config's compression, for every process of a cluster."""
    return {**DASK_SETTINGS, pipeline.compression.SETTING: pipeline.compression.dask_value(config.network.compression)}


def dask_env(settings: dict) -> dict[str, str]:
    return {"DASK_" + key.upper().replace(".", "__").replace("-", "_"): str(value) for key, value in settings.items()}


class WorkerSpec:
    """A shard's worker. ``env`` holds what it adds to its starter's environment, including the record
    of which variables the nanny adds; ``starter_env`` is the starting process's environment from before
    any nanny started in it."""

    def __init__(
        self,
        config: Config,
        shard: ShardConfig,
        starter_env=None,
        extra_env: dict | None = None,
        bind_host: str | None = None,
    ):
        self.config, self.shard = config, shard
        self.env = {**shard.worker_env(), **engine_env.worker_record(starter_env), **(extra_env or {})}
        self.host = bind_host or config.scheduler.host

    @property
    def nthreads(self) -> int:
        return self.config.intake.concurrent_batches

    @property
    def memory_limit(self) -> int:
        """Bytes of task results held before Dask spills to disk; 0 never spills."""
        return self.config.jobs.worker_memory_bytes(len(self.config.shards))

    @property
    def dask_settings(self) -> dict:
        settings = cluster_settings(self.config)
        if not self.memory_limit:
            return settings
        return {**settings, "distributed.worker.memory.target": 1.0}

    @property
    def resources(self) -> dict[str, int]:
        return {
            self.shard.resource: SHARD_RESOURCE_AMOUNT,
            ANSWER_SLOTS_RESOURCE: answer_slots(self.nthreads),
            READ_SLOTS_RESOURCE: self.config.jobs.reads_per_worker,
        }

    def nanny(self) -> dict:
        """A ``SpecCluster`` worker spec: a Nanny started in this process."""
        return {
            "cls": Nanny,
            "options": {
                "name": self.shard.name,
                "host": self.host,
                "protocol": protocol(self.config),
                "security": dask_security(self.config),
                "nthreads": self.nthreads,
                "memory_limit": self.memory_limit,  # spilling only, never paused or killed for memory
                "resources": dict(self.resources),
                "env": dict(self.env),
                "dashboard": False,
                # Its HTTP server runs anyway, so bind it to the host rather than every interface.
                "dashboard_address": f"{self.host}:0",
                "config": self.dask_settings,
                "preload": [WORKER_PRELOAD],
            },
        }

    def command(self, scheduler_address: str) -> list[str]:
        """The same worker as a ``dask worker`` command line, to run with ``process_env``."""
        return [
            sys.executable,
            "-m",
            "distributed.cli.dask_worker",
            scheduler_address,
            "--name",
            self.shard.name,
            "--host",
            self.host,
            "--nthreads",
            str(self.nthreads),
            "--memory-limit",
            str(self.memory_limit),
            "--resources",
            " ".join(f"{k}={v}" for k, v in self.resources.items()),
            "--no-dashboard",
            "--dashboard-address",
            f"{self.host}:0",
            "--preload",
            WORKER_PRELOAD,
            "--preload-nanny",
            NANNY_PRELOAD,
            *tls_args(self.config),
        ]

    def process_env(self, base_env: dict[str, str]) -> dict[str, str]:
        """``base_env`` with the Dask settings a Nanny gets as ``config`` and this worker's variables."""
        return {**base_env, **dask_env(self.dask_settings), **self.env}
