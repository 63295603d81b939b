"""Dask preload for a worker: its shard identity and, for workers the pipeline starts, its log file.

Used as ``dask worker ADDRESS --preload pipeline.worker.preload --shard gpu0 --pipeline-config cluster.yaml``. The
engine itself comes from the plugin the client registers on the scheduler, which Dask installs on every worker that
joins, including one a nanny restarts."""

from __future__ import annotations

import logging
import os
import sys

import click
from distributed import Worker

import pipeline.compression  # noqa: F401 - registers Dask's "zlib-ng" compressor (docs/operating.md)
from pipeline.config import load_config
from pipeline.names import (
    ANSWER_SLOTS_RESOURCE,
    LOG_ENV_ADDED,
    LOG_FILE_ENV,
    READ_SLOTS_RESOURCE,
    SHARD_RESOURCE_AMOUNT,
    answer_slots,
)

logger = logging.getLogger(__name__)


def join_shard(worker: Worker, shard_name: str, config_path: str | None) -> None:
    config = load_config(config_path)
    shard = config.shard(shard_name)
    if shard is None:
        raise click.UsageError(f"--shard {shard_name}: not in the config's shards ({', '.join(config.shard_names)})")
    os.environ.update(shard.worker_env())  # read when the engine starts, after this
    # Set before the worker registers, so the scheduler sees the resources from the start.
    for resource, amount in (
        (shard.resource, SHARD_RESOURCE_AMOUNT),
        (ANSWER_SLOTS_RESOURCE, answer_slots(worker.state.nthreads)),
        (READ_SLOTS_RESOURCE, config.jobs.reads_per_worker),
    ):
        worker.state.total_resources[resource] = worker.state.available_resources[resource] = amount
    logger.info("pipeline: this worker serves shard %s", shard.name)


def write_output_to(path: str) -> None:
    """Sends file descriptors 1 and 2 to ``path``, so C libraries and child processes such as vLLM's engine core
    write there too."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


@click.command()
@click.option("--shard", default=None, help="the shard (a name under `shards:` in the config) this worker serves")
@click.option(
    "--pipeline-config", "config_path", default=None, help="the pipeline's cluster.yaml (default: the repository's)"
)
def dask_setup(server, shard, config_path):
    if not isinstance(server, Worker):
        raise click.UsageError(
            "pipeline.worker.preload is the workers' preload; "
            "start the scheduler with --preload pipeline.scheduler.preload"
        )
    log_file = os.environ.pop(LOG_FILE_ENV, None)  # the engine need not see it
    for key in os.environ.pop(LOG_ENV_ADDED, "").split(","):
        os.environ.pop(key, None)
    if log_file:
        write_output_to(log_file)
    if shard:
        join_shard(server, shard, config_path)
    # Load what a cluster job's tasks unpickle into while the engine starts, not during the first job's first task.
    import pipeline.data.input  # noqa: F401
    import pipeline.steps.cluster_tasks  # noqa: F401
