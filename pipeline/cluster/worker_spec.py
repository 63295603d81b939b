"""One description of a shard's Dask worker, from which both clusters start it: the embedded
cluster as a ``Nanny`` in a ``SpecCluster`` (pipeline/cluster/local.py), the resident cluster
as a ``dask worker`` process (pipeline/cluster/resident.py). Either way the worker gets the
same name, host, threads, memory limit, shard resource, environment, Dask settings and preload.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from distributed import Nanny

import pipeline.compression  # registers Dask's "zlib-ng" compressor (docs/operating.md)
from pipeline import engine_env
from pipeline.cluster.security import dask_security, protocol, tls_args
from pipeline.config import Config
from pipeline.config.shards import ShardConfig
from pipeline.names import ANSWER_SLOTS_RESOURCE, READ_SLOTS_RESOURCE, SHARD_RESOURCE_AMOUNT, answer_slots

# What vLLM inside Dask workers needs (docs/architecture.md, "What runs where").
DASK_SETTINGS = {
    "distributed.worker.daemon": False,  # vLLM spawns its engine-core process
    "distributed.scheduler.work-stealing": False,  # stealing would break prefix affinity
    # Spilling: only by the size of the data held (``target``, set per worker from
    # jobs.worker_memory), never by the process's memory, which counts what the engine holds.
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

WORKER_PRELOAD = "pipeline.worker.preload"
NANNY_PRELOAD = "pipeline.compression"  # a `dask worker`'s nanny connects to the scheduler too


def cluster_settings(config: Config) -> dict:
    """``DASK_SETTINGS`` with the config's compression: what every process of a cluster gets
    (scheduler, nannies, workers and client alike)."""
    return {**DASK_SETTINGS, pipeline.compression.SETTING: pipeline.compression.dask_value(config.network.compression)}


def dask_env(settings: dict = DASK_SETTINGS) -> dict[str, str]:
    """Dask's settings as the environment variables ``dask scheduler`` / ``dask worker`` read."""
    return {"DASK_" + key.upper().replace(".", "__").replace("-", "_"): str(value) for key, value in settings.items()}


@dataclass(frozen=True)
class WorkerSpec:
    """A shard's worker. ``env``: the variables it starts with on top of its starter's (the
    shard's, and the record of which variables the nanny adds: pipeline/engine_env.py)."""

    config: Config
    shard: ShardConfig
    env: dict[str, str] = field(default_factory=dict)
    bind_host: str | None = None  # where it listens (default: the config's scheduler.host)

    @classmethod
    def for_shard(
        cls,
        config: Config,
        shard: ShardConfig,
        starter_env=None,
        extra_env: dict | None = None,
        bind_host: str | None = None,
    ) -> "WorkerSpec":
        """``starter_env``: the environment of the process that starts the nanny (default: this
        one's), before any nanny has started in it."""
        return cls(
            config,
            shard,
            {**shard.worker_env(), **engine_env.worker_record(starter_env), **(extra_env or {})},
            bind_host,
        )

    @property
    def host(self) -> str:
        return self.bind_host or self.config.scheduler.host

    @property
    def nthreads(self) -> int:
        return self.config.intake.concurrent_batches

    @property
    def memory_limit(self) -> int:
        """The bytes of task results this worker holds before Dask spills to disk (0: never)."""
        return self.config.jobs.worker_memory_bytes(len(self.config.shards))

    @property
    def dask_settings(self) -> dict:
        """Dask's settings for this worker: ``cluster_settings``, spilling above ``memory_limit``."""
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
                "memory_limit": self.memory_limit,  # spilling only (never paused or killed for memory)
                "resources": dict(self.resources),
                "env": dict(self.env),
                "dashboard": False,
                # Its HTTP server (/metrics, /health) runs anyway: on the config's host, not every interface.
                "dashboard_address": f"{self.host}:0",
                "config": self.dask_settings,
                "preload": [WORKER_PRELOAD],
            },
        }

    def command(self, scheduler_address: str) -> list[str]:
        """The same worker as a ``dask worker`` command line (run it with ``process_env``)."""
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
        """The environment of the ``dask worker`` process: ``base_env``, Dask's settings (what the
        Nanny gets as ``config``) and this worker's variables."""
        return {**base_env, **dask_env(self.dask_settings), **self.env}
