"""Dask preload for the scheduler: ``dask scheduler --preload pipeline.scheduler.preload``.

It installs the dashboard pages and the shard claims and, for an embedded cluster, stops the scheduler with the
process that started it."""

from __future__ import annotations

import logging
import os

import click
import dask
from distributed import Scheduler
from tornado.ioloop import PeriodicCallback

import pipeline.compression  # noqa: F401 - registers Dask's "zlib-ng" compressor (docs/operating.md)
from pipeline.names import EXIT_WITH_PARENT_ENV
from pipeline.scheduler import dashboard, shard_claims

logger = logging.getLogger(__name__)


def exit_with_parent(scheduler: Scheduler, interval_s: float = 1.0) -> None:
    """Stops an embedded cluster's scheduler once the process that started it is gone; nothing else would, and it
    would keep its ports."""
    parent = os.getppid()

    def check() -> None:
        if os.getppid() != parent:
            logger.warning("pipeline: the client process that started this scheduler is gone; closing")
            watch.stop()
            scheduler.loop.add_callback(scheduler.close)

    watch = PeriodicCallback(check, interval_s * 1000)
    watch.start()


@click.command()
def dask_setup(server):
    if not isinstance(server, Scheduler):
        raise click.UsageError(
            "pipeline.scheduler.preload is the scheduler's preload; "
            "start a worker with --preload pipeline.worker.preload"
        )
    dashboard.install(server)
    shard_claims.install(server)  # `pipeline worker --shard auto`, and the settings check of workers and clients
    # The scheduler unpickles each task it is sent, and a cluster job's tasks name these modules: load them now
    # rather than during the first job.
    import pipeline.data.input  # noqa: F401
    import pipeline.steps.cluster_tasks  # noqa: F401

    if os.environ.pop(EXIT_WITH_PARENT_ENV, None):
        exit_with_parent(server)
    if dask.config.get("distributed.scheduler.work-stealing"):
        logger.warning(
            "pipeline: work stealing is on; it moves batches away from the shard holding their "
            "document. Start the scheduler with DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING=False"
        )


def dask_teardown(server):
    dashboard.uninstall(server)
