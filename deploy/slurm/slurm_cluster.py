"""dask-vllm-pipeline on Slurm with dask-jobqueue: one Slurm job per GPU, each running
``python -m pipeline worker SCHEDULER --shard auto --config CONFIG --log-file - ...`` (the job's
output file gets its logs). The admin edits: the arguments below (config path, GPUs, partition,
account, walltime, memory, CPUs), and the config's ``shards:`` list, one entry per GPU job:
``{name: gpuN, kind: gpu, devices: [0]}`` (each job sees its one GPU as device 0).

    python deploy/slurm/slurm_cluster.py --config /shared/cluster.yaml --gpus 8 --partition gpu

prints the scheduler's address (put it in the config's ``scheduler.address`` for
``python -m pipeline run``) and runs until Ctrl-C, which cancels the jobs. The venv must be on a
file system the compute nodes share, at the same path (jobs run this interpreter).

Why SLURMCluster's own scheduler: dask-jobqueue 0.9.0 cannot submit workers to a scheduler
that runs elsewhere. ``JobQueueCluster.__init__`` always builds ``{"cls": scheduler_cls,
"options": scheduler_options}`` and SpecCluster starts it in this Python process; there is no
parameter for an existing scheduler's address, and ``close()`` sends the scheduler ``terminate``
(SpecCluster's ``shutdown_scheduler`` is not exposed). So ``make_cluster`` makes that scheduler
the pipeline's, as ``python -m pipeline scheduler`` would start it: the scheduler preload
(dashboard pages, the shard claims behind ``--shard auto``, the settings check), the Dask
settings of ``cluster_settings`` (no work stealing, compression, ...) and the config's TLS.
Its lifetime is this process's: if the process dies without closing the cluster, the jobs keep
retrying until their walltime. For a scheduler that outlives any one process, run
``python -m pipeline scheduler`` on the head node (deploy/systemd/pipeline-scheduler.service)
and submit ``worker_job_script(...)`` (``--job-script ADDRESS``) with ``sbatch --array=1-N``.

dask-jobqueue renders ``python -m pipeline worker SCHEDULER --name .. --nthreads ..
--memory-limit .. --death-timeout ..`` and our ``worker_extra_args``; ``pipeline worker``
passes the options it does not know to ``dask worker``. ``--nthreads`` is the config's
``advanced.intake.concurrent_batches`` (the threads the pipeline gives a worker); the job's
CPUs are ``--cpus``. ``--memory-limit`` (job data held before spilling) is 40 % of ``--memory``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

import dask
import yaml
from dask.utils import format_bytes, parse_bytes
from dask_jobqueue import SLURMCluster
from dask_jobqueue.slurm import SLURMJob, slurm_format_bytes_ceil

from pipeline.cluster.hosts import DEFAULT_DASHBOARD_PORT, DEFAULT_PORT, check_protocol, exposure_error
from pipeline.cluster.security import dask_security
from pipeline.cluster.worker_spec import cluster_settings
from pipeline.config import Config, load_config
from pipeline.config.tuning import AUTO_WORKER_MEMORY_SHARE

SCHEDULER_PRELOAD = "pipeline.scheduler.preload"
WORKER_HOST = "$(hostname)"  # expanded on the compute node: the address the worker listens on


def _config(config_path: str) -> Config:
    with open(config_path) as f:
        shards = (yaml.safe_load(f) or {}).get("shards")
    if not isinstance(shards, list):
        raise ValueError(f"{config_path}: list the shards (shards: auto lays out this machine, not the GPU nodes)")
    return load_config(config_path)


def _job_options(
    config: Config,
    config_path: str,
    insecure: bool,
    worker_host: str,
    memory: str,
    cpus: int,
    walltime: str,
    partition: str | None,
    account: str | None,
    **job_kwargs,
) -> dict:
    """SLURMJob's options for one GPU worker (shared by ``make_cluster`` and ``worker_job_script``)."""
    return dict(
        job_name="pipeline-worker",
        cores=config.intake.concurrent_batches,
        processes=1,
        job_cpu=cpus,
        job_mem=slurm_format_bytes_ceil(parse_bytes(memory)),
        memory=format_bytes(int(AUTO_WORKER_MEMORY_SHARE * parse_bytes(memory))),
        job_extra_directives=["--gres=gpu:1"],
        walltime=walltime,
        queue=partition,
        account=account,
        python=sys.executable,
        worker_command="pipeline worker",
        worker_extra_args=[
            "--shard",
            "auto",
            "--config",
            os.path.abspath(config_path),
            "--host",
            worker_host,
            "--log-file",
            "-",
            *(["--insecure"] if insecure else []),
        ],
        **job_kwargs,
    )


def make_cluster(
    config_path: str,
    n_gpus: int | None = None,
    *,
    host: str | None = None,
    port: int = DEFAULT_PORT,
    dashboard_address: str | None = None,
    insecure: bool = False,
    worker_host: str = WORKER_HOST,
    memory: str = "64GB",
    cpus: int = 8,
    walltime: str = "24:00:00",
    partition: str | None = None,
    account: str | None = None,
    **job_kwargs,
) -> SLURMCluster:
    """A SLURMCluster whose scheduler is the pipeline's, listening on ``host`` (default: this
    node's name) and scaled to ``n_gpus`` one-GPU jobs (default: one per shard of the config).
    Beyond loopback it needs the config's ``security:`` (TLS), or ``insecure=True``."""
    config = _config(config_path)
    n_gpus = len(config.shards) if n_gpus is None else n_gpus
    if n_gpus > len(config.shards):
        raise ValueError(f"{n_gpus} GPU jobs but {len(config.shards)} shards in {config_path}: one shard per job")
    host = host or socket.gethostname()
    problem = exposure_error(host, config, insecure)
    if problem:
        raise ValueError(problem)
    dask.config.set(cluster_settings(config))  # the scheduler's and this process's (its client's)
    cluster = SLURMCluster(
        security=dask_security(config),
        scheduler_options={
            "host": host,
            "port": port,
            "preload": [SCHEDULER_PRELOAD],
            "dashboard_address": dashboard_address or f"{host}:{DEFAULT_DASHBOARD_PORT}",
        },
        **_job_options(
            config, config_path, insecure, worker_host, memory, cpus, walltime, partition, account, **job_kwargs
        ),
    )
    if n_gpus:
        cluster.scale(jobs=n_gpus)
    return cluster


def worker_job_script(
    config_path: str,
    scheduler_address: str,
    *,
    insecure: bool = False,
    worker_host: str = WORKER_HOST,
    memory: str = "64GB",
    cpus: int = 8,
    walltime: str = "24:00:00",
    partition: str | None = None,
    account: str | None = None,
    **job_kwargs,
) -> str:
    """The same job script for a scheduler started elsewhere (``python -m pipeline scheduler``):
    submit it N times, or once with ``sbatch --array=1-N``; each job names its worker after its
    Slurm job id."""
    config = _config(config_path)
    check_protocol(scheduler_address, config)  # tls:// exactly when the config has security:
    options = _job_options(
        config, config_path, insecure, worker_host, memory, cpus, walltime, partition, account, **job_kwargs
    )
    return SLURMJob(scheduler=scheduler_address, name="pipeline-${SLURM_JOB_ID}", **options).job_script()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="cluster.yaml on a shared file system (absolute path)")
    p.add_argument("--gpus", type=int, default=None, help="GPU jobs (default: one per shard of the config)")
    p.add_argument("--host", default=None, help="where the scheduler listens (default: this node's name)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--insecure", action="store_true", help="without TLS beyond loopback (a network only you reach)")
    p.add_argument("--partition", default=None)
    p.add_argument("--account", default=None)
    p.add_argument("--walltime", default="24:00:00")
    p.add_argument("--memory", default="64GB", help="each job's memory")
    p.add_argument("--cpus", type=int, default=8, help="each job's CPUs")
    p.add_argument(
        "--job-script",
        metavar="SCHEDULER_ADDRESS",
        default=None,
        help="print the job script for a scheduler started elsewhere, and exit",
    )
    a = p.parse_args(argv)
    slurm = dict(
        insecure=a.insecure, memory=a.memory, cpus=a.cpus, walltime=a.walltime, partition=a.partition, account=a.account
    )
    if a.job_script:
        print(worker_job_script(a.config, a.job_script, **slurm))
        return 0
    cluster = make_cluster(a.config, a.gpus, host=a.host, port=a.port, **slurm)
    print(f"scheduler: {cluster.scheduler_address}  dashboard: {cluster.dashboard_link}", flush=True)
    print(cluster.job_script(), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
