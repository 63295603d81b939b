"""Start the embedded local cluster, or connect to a configured scheduler.

Each shard gets one Nanny-managed worker advertising the resource ``shard-<name>``, so a batch
routed to a shard runs only there. The scheduler runs in a process of its own so that it and the
client's job loop do not take turns at one interpreter lock."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

import dask
from distributed import Client, SpecCluster
from distributed.deploy.spec import ProcessInterface

from pipeline.cluster.security import dask_security, tls_args
from pipeline.cluster.settings_check import settings_mismatch
from pipeline.cluster.worker_spec import WorkerSpec, cluster_settings, dask_env
from pipeline.config import Config, ConfigError
from pipeline.names import EXIT_WITH_PARENT_ENV, LOG_DIR_ENV, LOG_ENV_ADDED, LOG_FILE_ENV
from pipeline.scheduler.shard_claims import SETTINGS_HANDLER

# Client only: Dask keeps each connection's recent messages for debugging, and from the client
# those carry every batch's payload. The scheduler keeps its log because the dashboard reads it.
CLIENT_SETTINGS = {"distributed.admin.low-level-log-length": 0}


def apply_dask_settings(config: Config) -> None:
    dask.config.set({**cluster_settings(config), **CLIENT_SETTINGS})


REPO_ROOT = Path(__file__).resolve().parents[2]


def process_env(config: Config) -> dict[str, str]:
    """A Dask child process's environment: this one's, with Dask's settings and this repository importable."""
    python_path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, **dask_env(cluster_settings(config)), "PYTHONPATH": python_path}


def scheduler_command(config: Config, scheduler_file: Path) -> list[str]:
    """Its HTTP server runs even without the dashboard, so it is bound to the config's host rather
    than Dask's default of every interface."""
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


def tail(path: Path) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-5:])
    except OSError:
        return ""


def spawn(args: list[str], env: dict, out: IO | None, **popen) -> subprocess.Popen:
    """A Dask process writing to ``out``, or to this terminal."""
    stderr = subprocess.STDOUT if out is not None else None
    return subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=stderr, **popen)


class SchedulerProcess(ProcessInterface):
    """SpecCluster's scheduler as a ``dask scheduler`` process of its own, writing to ``log`` or the terminal."""

    def __init__(self, config: Config, log: Path | None = None):
        self.config = config
        self.log = log
        self.proc: subprocess.Popen | None = None
        super().__init__()

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._start)
        await super().start()

    def _start(self) -> None:
        with tempfile.TemporaryDirectory(prefix="pipeline-scheduler-") as folder:
            scheduler_file = Path(folder) / "scheduler.json"
            env = {**process_env(self.config), EXIT_WITH_PARENT_ENV: "1"}
            with open(self.log, "w") if self.log is not None else contextlib.nullcontext() as out:
                self.proc = spawn(scheduler_command(self.config, scheduler_file), env, out)
            try:
                self.address = read_scheduler_file(scheduler_file, self.proc, self.log, 60)["address"]
            except BaseException:
                self.proc.kill()
                raise

    async def close(self) -> None:
        # SpecCluster has already asked the scheduler to terminate; wait for it, then make sure.
        if self.proc is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._stop)
        await super().close()

    def _stop(self) -> None:
        assert self.proc is not None
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# Quiets a worker with a log file from its first line; the preload removes it before the engine starts.
QUIET_DASK = ("DASK_LOGGING__DISTRIBUTED", "warning")


def worker_log_dir(config: Config) -> Path:
    override = os.environ.get(LOG_DIR_ENV)
    return Path(override).expanduser() if override else config.model.cache_path / "logs"


def start_local_cluster(config: Config, log_dir: Path | None = None) -> SpecCluster:
    """Call before any nanny has started in this process: each worker records which variables the
    nannies add, so its engine does not inherit them. With ``log_dir`` each worker and its engine
    write to ``<shard>.log`` there instead of the terminal."""
    quiet = {}
    if log_dir is not None and QUIET_DASK[0] not in os.environ:
        # A worker reads its logging levels on importing Dask, before a nanny's env applies, so this
        # goes in the environment it is spawned with; Pipeline.start restores it once the workers run.
        os.environ[QUIET_DASK[0]] = QUIET_DASK[1]
        quiet = {LOG_ENV_ADDED: QUIET_DASK[0]}
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    workers = {}
    for shard in config.shards:
        env = dict(quiet)
        if log_dir is not None:
            (log_dir / f"{shard.name}.log").write_text("")
            env[LOG_FILE_ENV] = str(log_dir / f"{shard.name}.log")
        workers[shard.name] = WorkerSpec(config, shard, extra_env=env).nanny()
    scheduler = {
        "cls": SchedulerProcess,
        "options": {"config": config, "log": log_dir / "scheduler.log" if log_dir is not None else None},
    }
    return SpecCluster(workers=workers, scheduler=scheduler, name="pipeline", security=dask_security(config))


def check_scheduler_settings(client: Client, config: Config) -> None:
    """Raise ConfigError where the scheduler's settings differ from this config's."""
    theirs = client.sync(getattr(client.scheduler, SETTINGS_HANDLER))
    problem = settings_mismatch(theirs, config, f"the scheduler {config.scheduler.address}", "this config")
    if problem:
        raise ConfigError(problem)


def connect(config: Config, log_dir: Path | None = None) -> tuple[Client, SpecCluster | None]:
    """A client, and the embedded cluster if one was started. Its nannies write Dask's worker variables
    into this process's environment, which the caller restores once the workers run."""
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
        # Results come straight from the workers rather than crossing the scheduler as well.
        return Client(cluster, security=security, direct_to_workers=True), cluster
    except BaseException:
        cluster.close()
        raise
