"""The resident cluster's state file, and the fingerprint of the config it runs: a client may use
the cluster only with a config of the same fingerprint."""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import psutil

from pipeline.config import Config, ConfigError
from pipeline.names import CLUSTER_DIR_ENV

STATE_FILE = "state.json"


class ClusterMismatch(ConfigError):
    """A resident cluster is up, for another config."""


def cluster_dir(config: Config) -> Path:
    override = os.environ.get(CLUSTER_DIR_ENV)
    return Path(override).expanduser() if override else config.model.cache_path / "cluster"


@dataclass
class ClusterState:
    address: str  # the scheduler's
    dashboard: str | None
    config_file: str  # a frozen copy of the config the cluster runs
    fingerprint: dict
    processes: dict[str, list]  # "scheduler" or shard name -> [pid, process create time]
    log_dir: str
    started: float = field(default_factory=time.time)

    def save(self, folder: Path) -> None:
        path = folder / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, folder: Path) -> "ClusterState | None":
        try:
            return cls(**json.loads((folder / STATE_FILE).read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                f"cannot read the local cluster's state file {folder / STATE_FILE} ({exc}); "
                f"remove it if no cluster is running"
            ) from None

    def dead_processes(self) -> list[str]:
        """The recorded processes that are gone; a pid reused since counts as gone."""
        return [name for name, (pid, created) in self.processes.items() if not _same_process(pid, created)]

    def scheduler_reachable(self) -> bool:
        u = urlparse(self.address)
        try:
            with socket.create_connection((u.hostname, u.port), timeout=2):
                return True
        except OSError:
            return False

    def stale_reason(self) -> str | None:
        """Why this cluster no longer runs, or None while it runs."""
        if "scheduler" in self.dead_processes():
            return "its scheduler process is gone"
        if not self.scheduler_reachable():
            return "its scheduler does not answer"
        return None

    @property
    def uptime_s(self) -> float:
        return time.time() - self.started


def _same_process(pid: int, created: float) -> bool:
    try:
        p = psutil.Process(pid)
        return abs(p.create_time() - created) < 1e-3 and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def fingerprint(config: Config, model: str) -> dict:
    """What a cluster's workers use. Prompts and sampling travel with each job's batches, so they
    are not part of it."""
    return {
        "model": model,
        "engine": config.engine.model_dump(mode="json"),
        "shards": {s.name: s.model_dump(mode="json", exclude={"name"}) for s in config.shards},
        "advanced": {
            "intake": {
                "max_in_flight": config.intake.max_in_flight,
                "concurrent_batches": config.intake.concurrent_batches,
            }
        },
        "security": config.security.model_dump(mode="json"),
    }


def differences(running: dict, wanted: dict, prefix: str = "") -> list[str]:
    """One line per setting that differs, by its dotted name."""
    out = []
    for key in sorted(set(running) | set(wanted), key=str):
        a, b = running.get(key, "(unset)"), wanted.get(key, "(unset)")
        name = f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, name + ".")
        elif a != b:
            out.append(f"{name}: running {a!r}, this config {b!r}")
    return out
