"""Start the embedded local cluster from the config, or connect to an existing scheduler.

Uses Dask's own SpecCluster/Nanny machinery: one Nanny-managed worker process per
shard, pinned by its environment, advertising the resource ``shard-<name>`` so a
batch routed to that shard can only run there. The scheduler runs in its own process
(``dask scheduler``, as ``python -m pipeline up`` starts it), not in the client's: the
client then has its interpreter to itself (in one process the scheduler and the job loop
took turns at one interpreter lock: 5,044 rows/s on the fake engine against 6,625 with a
separate scheduler, 100,000 rows, 2 shards).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dask
from distributed import Client, SpecCluster
from distributed.deploy.spec import ProcessInterface

from pipeline.cluster.security import dask_security, tls_args
from pipeline.cluster.settings_check import settings_mismatch
from pipeline.cluster.worker_spec import WorkerSpec, cluster_settings, dask_env
from pipeline.config import Config, ConfigError
from pipeline.names import EXIT_WITH_PARENT_ENV, LOG_DIR_ENV, LOG_ENV_ADDED, LOG_FILE_ENV
from pipeline.scheduler.shard_claims import SETTINGS_HANDLER

# In the client's process only: Dask keeps the last 1,000 messages each connection sent, for
# debugging; from the client those carry every batch's payload (~100-200 KB each on the null
# engine at full speed), which made most of a 1M-row job's memory. The scheduler keeps its
# event log (the dashboard page reads it), so this is not among DASK_SETTINGS.
CLIENT_SETTINGS = {"distributed.admin.low-level-log-length": 0}


def apply_dask_settings(config: Config) -> None:
    dask.config.set({**cluster_settings(config), **CLIENT_SETTINGS})


REPO_ROOT = Path(__file__).resolve().parents[2]


def process_env(config: Config) -> dict[str, str]:
    """The environment of a ``dask scheduler`` / ``dask worker`` process the pipeline starts:
    this one's, with Dask's settings for ``config`` and this repository importable."""
    python_path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, **dask_env(cluster_settings(config)), "PYTHONPATH": python_path}


def scheduler_command(config: Config, scheduler_file: Path) -> list[str]:
    """``dask scheduler`` for this config. Its HTTP server (/metrics, /health) runs even without
    the dashboard, so it is bound to the config's host then too (Dask's default is every
    interface)."""
    host = config.scheduler.host
    dash = config.scheduler.dashboard_address
    return [
        sys.executable,
        "-m",
        "distributed.cli.dask_scheduler",
        "--host",
        host,
        "--port",
        str(config.scheduler.port),
        "--scheduler-file",
        str(scheduler_file),
        "--preload",
        "pipeline.scheduler.preload",
        *(["--dashboard-address", dash] if dash else ["--no-dashboard", "--dashboard-address", f"{host}:0"]),
        *tls_args(config),
    ]


def read_scheduler_file(path: Path, proc: subprocess.Popen, log: Path | None, timeout_s: float) -> dict:
    """The scheduler's identity once it has written it; a clear error if it exits or hangs."""
    deadline = time.monotonic() + timeout_s
    where = f"; its log: {log}" if log is not None else ""
    while True:
        if path.exists():
            try:
                return json.loads(path.read_text())
            except ValueError:
                pass  # being written
        if proc.poll() is not None:
            raise RuntimeError(
                f"the scheduler exited at start (exit code {proc.returncode}){where}\n"
                + (tail(log) if log is not None else "")
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"the scheduler did not start within {timeout_s:.0f} s{where}")
        time.sleep(0.05)


def tail(path: Path, lines: int = 5) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class SchedulerProcess(ProcessInterface):
    """SpecCluster's scheduler as a ``dask scheduler`` process of its own. Output goes to
    ``log`` (None: this process's terminal)."""

    def __init__(self, config: Config, log: Path | None = None, timeout_s: float = 60.0):
        self.config = config
        self.log = log
        self.timeout_s = timeout_s
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}
        super().__init__()

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._start)
        await super().start()

    def _start(self) -> None:
        with tempfile.TemporaryDirectory(prefix="pipeline-scheduler-") as folder:
            scheduler_file = Path(folder) / "scheduler.json"
            out = open(self.log, "w") if self.log is not None else None
            try:
                self.proc = subprocess.Popen(
                    scheduler_command(self.config, scheduler_file),
                    env={**process_env(self.config), EXIT_WITH_PARENT_ENV: "1"},
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT if out else None,
                )
            finally:
                if out is not None:
                    out.close()
            try:
                self.info = read_scheduler_file(scheduler_file, self.proc, self.log, self.timeout_s)
            except BaseException:
                self.proc.kill()
                raise
        self.address = self.info["address"]

    async def close(self) -> None:
        # SpecCluster has asked the scheduler to terminate already; wait for it, then make sure.
        if self.proc is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._stop)
        await super().close()

    def _stop(self, timeout_s: float = 10.0) -> None:
        assert self.proc is not None
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# Variables set only so that a worker with a log file is quiet from its first line; the
# preload removes those named here before the engine starts.
QUIET_DASK = ("DASK_LOGGING__DISTRIBUTED", "warning")


def worker_log_dir(config: Config) -> Path:
    """Where an embedded cluster's workers write ``<shard>.log`` (unless verbose)."""
    override = os.environ.get(LOG_DIR_ENV)
    return Path(override).expanduser() if override else config.model.cache_path / "logs"


def worker_specs(config: Config, log_dir: Path | None = None, extra_env: dict | None = None) -> dict:
    """Call before any nanny has started in this process: each worker's environment records
    which variables the nannies add, so its engine does not inherit them (engine_env.py).
    ``log_dir``: each worker (and its engine) writes its output to ``<shard>.log`` there
    instead of this process's terminal (the preload moves it; pipeline/worker/preload.py)."""
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        for shard in config.shards:
            (log_dir / f"{shard.name}.log").write_text("")
    return {
        shard.name: WorkerSpec.for_shard(
            config,
            shard,
            extra_env={
                **({LOG_FILE_ENV: str(log_dir / f"{shard.name}.log")} if log_dir is not None else {}),
                **(extra_env or {}),
            },
        ).nanny()
        for shard in config.shards
    }


def start_local_cluster(config: Config, log_dir: Path | None = None) -> SpecCluster:
    apply_dask_settings(config)
    quiet = {}
    if log_dir is not None and QUIET_DASK[0] not in os.environ:
        # A worker logs that it runs its preload before the preload can move its output to the
        # log file, and reads its logging levels when it imports Dask, before a nanny's ``env``
        # applies: so from the environment it is spawned with (Pipeline.start puts this
        # process's environment back once the workers run). The preload drops it again, so the
        # engine does not inherit it.
        os.environ[QUIET_DASK[0]] = QUIET_DASK[1]
        quiet = {LOG_ENV_ADDED: QUIET_DASK[0]}
    scheduler = {
        "cls": SchedulerProcess,
        "options": {"config": config, "log": log_dir / "scheduler.log" if log_dir is not None else None},
    }
    workers = worker_specs(config, log_dir, extra_env=quiet)
    return SpecCluster(workers=workers, scheduler=scheduler, name="pipeline", security=dask_security(config))


def check_scheduler_settings(client: Client, config: Config) -> None:
    """A ``ConfigError`` where the scheduler's settings differ from this config's (a scheduler
    without the pipeline's preload cannot say, and is not checked)."""
    theirs = client.sync(getattr(client.scheduler, SETTINGS_HANDLER))
    problem = settings_mismatch(theirs, config, f"the scheduler {config.scheduler.address}", "this config")
    if problem:
        raise ConfigError(problem)


def connect(config: Config, log_dir: Path | None = None) -> tuple[Client, SpecCluster | None]:
    """A client for the configured cluster, and the embedded cluster if one was started.

    The nannies of an embedded cluster write Dask's worker variables into this process's
    environment before they spawn their workers; they are put back as they were once the
    workers run (``engine_env.restore``; ``Pipeline.close`` does it again after a restart)."""
    apply_dask_settings(config)
    security = dask_security(config)
    if config.scheduler.address:
        client = Client(config.scheduler.address, security=security)
        try:
            check_scheduler_settings(client, config)
        except BaseException:
            client.close()
            raise
        return client, None
    cluster = start_local_cluster(config, log_dir)
    try:
        # Results straight from the workers: through the scheduler (Dask's default) every batch's
        # results cross one more process, which the job then waits on.
        return Client(cluster, security=security, direct_to_workers=True), cluster
    except BaseException:
        cluster.close()
        raise
