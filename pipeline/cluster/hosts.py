"""One command per host: ``python -m pipeline scheduler`` and ``python -m pipeline worker``.

Each starts Dask's own process with everything the pipeline needs, so the user sets no Dask variable.
The worker command starts its ``dask worker`` again whenever it ends, which is how a worker host
rejoins after its scheduler went away."""

from __future__ import annotations

import asyncio
import ctypes
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Callable

import dask
from distributed.comm import get_address_host, parse_address
from distributed.comm.core import FatalCommClosedError
from distributed.core import rpc

from pipeline.cluster.local import process_env, read_scheduler_file, scheduler_command, spawn
from pipeline.cluster.security import dask_security, protocol
from pipeline.cluster.settings_check import settings_mismatch
from pipeline.cluster.supervisor import Backoff, Supervisor
from pipeline.cluster.worker_spec import WorkerSpec, cluster_settings
from pipeline.config import Config, ConfigError
from pipeline.scheduler.shard_claims import CLAIM_HANDLER, SETTINGS_HANDLER

DEFAULT_PORT = 8786
DEFAULT_DASHBOARD_PORT = 8787


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        try:
            return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
        except OSError:
            return False


def exposure_error(host: str, config: Config, insecure: bool) -> str | None:
    """Why listening on ``host`` is refused, or None where it is allowed."""
    if is_loopback(host) or config.security.enabled or insecure:
        return None
    return (
        f"--host {host}: refusing to listen beyond loopback without TLS. A Dask scheduler or worker runs the "
        f"code its peers send it, so anyone who reaches {host} could run commands here, and the rows would "
        f"cross the network unencrypted. Give the config a security: section (tls_ca_file, tls_cert, tls_key; "
        f'docs/operating.md, "TLS and network exposure"), or pass --insecure on a network only you can reach'
    )


def _open_log(path: str | None, config: Config, name: str) -> tuple[Path | None, IO | None]:
    """The log file and its handle, or None for stderr (``--log-file -``)."""
    if path == "-":
        return None, None
    target = Path(path).expanduser() if path else config.model.cache_path / "logs" / f"{name}.log"
    target.parent.mkdir(parents=True, exist_ok=True)
    return target, open(target, "a", buffering=1)


def _reporter(log: IO | None) -> Callable[[str], None]:
    """Report a line on stderr, which systemd keeps in its journal, and in the log file."""

    def say(line: str) -> None:
        print(f"pipeline: {line}", file=sys.stderr, flush=True)
        if log is not None:
            log.write(f"pipeline: {line}\n")

    return say


def _die_with_parent() -> None:
    """Runs in the child: have Linux SIGTERM it when this command dies, even by SIGKILL, so no
    scheduler or worker is left holding its port or shard."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the supervisor still stops the child
        pass


PR_SET_PDEATHSIG = 1


def run_scheduler(
    config: Config, host: str | None, port: int | None, dashboard: str | None, insecure: bool, log_file: str | None
) -> int:
    host = host or config.scheduler.host
    problem = exposure_error(host, config, insecure)
    if problem:
        raise ConfigError(problem)
    if dashboard is None and config.scheduler.dashboard_address is not None:
        dashboard = f"{host}:{DEFAULT_DASHBOARD_PORT}"
    config = config.replace(
        scheduler={
            "host": host,
            "port": DEFAULT_PORT if port is None else port,
            "dashboard_address": None if dashboard == "none" else dashboard,
        }
    )
    target, log = _open_log(log_file, config, "scheduler")
    say = _reporter(log)
    folder = tempfile.mkdtemp(prefix="pipeline-scheduler-")
    scheduler_file = Path(folder) / "scheduler.json"

    def start(_supervisor: Supervisor) -> subprocess.Popen:
        child = spawn(scheduler_command(config, scheduler_file), process_env(config), log, preexec_fn=_die_with_parent)
        info = read_scheduler_file(scheduler_file, child, target, 120)
        board = info.get("services", {}).get("dashboard") if config.scheduler.dashboard_address else None
        say(
            f"scheduler at {info['address']}"
            + (f"; dashboard http://{host}:{board}/status" if board else "")
            + f"; logs: {target or 'this terminal'}"
        )
        say(
            f"start each worker host with: python -m pipeline worker {info['address']} --shard NAME|auto "
            f"--host ITS_ADDRESS --config CLUSTER_YAML"
        )
        return child

    try:
        return Supervisor(start, say, restart=False).run()
    except RuntimeError as exc:  # it exited or hung at start
        say(f"error: {exc}")
        return 1
    finally:
        scheduler_file.unlink(missing_ok=True)
        os.rmdir(folder)
        if log is not None:
            log.close()


def worker_host(address: str, host: str | None, config: Config) -> str:
    """Where the worker listens: ``--host``, or loopback when its scheduler is on this host."""
    if host:
        return host
    if is_loopback(get_address_host(address)):
        return config.scheduler.host if is_loopback(config.scheduler.host) else "127.0.0.1"
    raise ConfigError(
        f"the scheduler {address} is on another host: give --host ADDRESS, this host's address on the "
        f"network that reaches it (the scheduler connects back to its workers there)"
    )


def check_protocol(address: str, config: Config) -> None:
    scheme, _ = parse_address(address)
    wanted = protocol(config).removesuffix("://")
    if scheme != wanted:
        why = "the config has a security: section" if wanted == "tls" else "the config has no security: section"
        raise ConfigError(f"scheduler address {address}: {why}, so it must start with {wanted}://")


def ask_scheduler(address: str, config: Config, op: str, **kwargs):
    """Call the scheduler's handler ``op``; OSError while it cannot be reached."""

    async def ask():
        security = dask_security(config)
        args = security.get_connection_args("client") if security is not None else {}
        async with rpc(address, connection_args=args, timeout=10) as r:
            return await getattr(r, op)(**kwargs)

    with dask.config.set(cluster_settings(config)):
        return asyncio.run(ask())


def visible_devices(inherited: str, devices: list[int]) -> str:
    """A GPU shard's ``CUDA_VISIBLE_DEVICES`` where a batch system already gave this process some
    GPUs: the shard's device numbers index that list, so ``devices: [0]`` is the first GPU given."""
    given = [d for d in inherited.split(",") if d.strip()]
    if any(d >= len(given) for d in devices):
        raise ConfigError(
            f"the shard's GPUs {devices} are not all among the {len(given)} this host gave the worker "
            f"(CUDA_VISIBLE_DEVICES={inherited})"
        )
    return ",".join(given[d] for d in devices)


class WorkerHost:
    """What a worker host keeps across restarts of its ``dask worker``: its shard."""

    def __init__(self, config: Config, address: str, shard: str, host: str, dask_args: list[str], log_file: str | None):
        self.config, self.address, self.host, self.dask_args = config, address, host, dask_args
        self.wanted, self.log_file = shard, log_file
        self.shard: str | None = None  # the running worker's
        self.claimant = f"{socket.gethostname()}/{host}/{os.getpid()}"
        self.log: IO | None = None
        self.say: Callable[[str], None] = _reporter(None)

    def _agree(self, supervisor: Supervisor) -> str:
        """Wait until the scheduler answers; check its settings; claim a shard (``--shard auto``)."""
        waited = Backoff(first_s=1.0, cap_s=5.0)
        while True:
            try:
                theirs = ask_scheduler(self.address, self.config, SETTINGS_HANDLER)
                break
            except FatalCommClosedError as exc:  # an OSError too, but a TLS refusal does not heal by waiting
                raise ConfigError(
                    f"TLS with the scheduler {self.address} failed ({exc.__cause__ or exc}): this "
                    f"host's certificate must be signed by the CA the scheduler trusts, and the "
                    f"scheduler's by this config's security.tls_ca_file"
                ) from None
            except OSError as exc:
                delay = waited.after(0)
                self.say(
                    f"the scheduler {self.address} cannot be reached ({type(exc).__name__}); trying again in "
                    f"{delay:.0f} s"
                )
                supervisor.wait(delay)
        problem = settings_mismatch(theirs, self.config, f"the scheduler {self.address}", "this worker's config")
        if problem:
            raise ConfigError(problem)
        if self.wanted != "auto":
            return self.wanted
        if theirs is None:  # Dask's reply to an operation it has no handler for
            raise ConfigError(
                f"the scheduler {self.address} does not run the pipeline's preload (--shard auto "
                f"needs it): start it with python -m pipeline scheduler"
            )
        while True:
            chosen = ask_scheduler(
                self.address,
                self.config,
                CLAIM_HANDLER,
                candidates=self.config.shard_names,
                claimant=self.claimant,
                prefer=self.shard,
            )
            if chosen is not None:
                return chosen
            self.say(
                f"every shard of the config ({', '.join(self.config.shard_names)}) has a worker; waiting for one "
                f"to be free"
            )
            supervisor.wait(10)

    def start(self, supervisor: Supervisor) -> subprocess.Popen:
        shard = self._agree(supervisor)
        if shard != self.shard:
            if self.log is not None:
                self.log.close()
            target, self.log = _open_log(self.log_file, self.config, shard)
            self.say = _reporter(self.log)
            self.say(
                f"worker for shard {shard} on {self.host}, scheduler {self.address}; logs: {target or 'this terminal'}"
            )
        self.shard = shard
        shard_config = self.config.shard(shard)
        assert shard_config is not None  # checked when the command started
        spec = WorkerSpec(self.config, shard_config, starter_env=os.environ, bind_host=self.host)
        env = spec.process_env(process_env(self.config))
        given = os.environ.get("CUDA_VISIBLE_DEVICES")
        if shard_config.kind == "gpu" and given and "CUDA_VISIBLE_DEVICES" not in shard_config.env:
            env["CUDA_VISIBLE_DEVICES"] = visible_devices(given, shard_config.devices)
        return spawn([*spec.command(self.address), *self.dask_args], env, self.log, preexec_fn=_die_with_parent)


def run_worker(
    config: Config,
    address: str | None,
    shard: str,
    host: str | None,
    insecure: bool,
    log_file: str | None,
    dask_args: list[str],
    restart: bool = True,
) -> int:
    address = address or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if not address:
        raise ConfigError(
            "give the scheduler's address (tcp://HOST:8786, or tls://... with TLS), or set DASK_SCHEDULER_ADDRESS"
        )
    if "://" not in address:
        address = protocol(config) + address
    check_protocol(address, config)
    if shard != "auto" and config.shard(shard) is None:
        raise ConfigError(
            f"--shard {shard}: not in the config's shards ({', '.join(config.shard_names)}); or give "
            f"--shard auto to take the first shard no worker serves"
        )
    host = worker_host(address, host, config)
    problem = exposure_error(host, config, insecure)
    if problem:
        raise ConfigError(problem)
    worker = WorkerHost(config, address, shard, host, dask_args, log_file)
    try:
        return Supervisor(worker.start, lambda line: worker.say(line), restart=restart).run()
    finally:
        if worker.log is not None:
            worker.log.close()
