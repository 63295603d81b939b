"""A pipeline cluster across the hosts of a network-namespace rig (helpers/netns.py), started the
way docs/operating.md tells a user to: ``python -m pipeline scheduler`` on the first host,
``python -m pipeline worker`` on each of the others, and the client (``python -m pipeline
run``) on the scheduler's host. Files (config, input, output, logs) are shared, as a shared file
system would be across real hosts; every byte between processes crosses the rig's links.
"""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[3]
PIPELINE = [sys.executable, "-m", "pipeline"]
PORT = 8786
DASHBOARD = 8787


def printed_address(proc, timeout_s: float = 60.0) -> tuple[str, int]:
    """The address and dashboard port a ``pipeline scheduler`` started with ``stderr=PIPE``
    prints once it listens."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        assert line or proc.poll() is None, "the scheduler exited"
        if line.startswith("pipeline: scheduler at "):
            address = line.split()[3].rstrip(";")
            port = int(line.split("http://")[1].split(":")[1].split("/")[0])
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # (keep its pipe drained)
            return address, port
    raise AssertionError("the scheduler did not start")


def write_rows(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


class RigCluster:
    """``hosts[0]`` runs the scheduler and the client; ``hosts[i]`` (i >= 1) the worker of
    shard ``shards[i - 1]``. ``loopback``: every process on ``hosts[0]``, over 127.0.0.1 (the
    one-host reference of a measurement)."""

    def __init__(self, rig, folder: Path, config: dict, env: dict | None = None, loopback: bool = False):
        self.rig, self.folder = rig, folder
        self.head = rig[0]
        self.loopback = loopback
        self.bind = "127.0.0.1" if loopback else self.head.address
        self.tls = bool(config.get("security"))
        self.address = f"{'tls' if self.tls else 'tcp'}://{self.bind}:{PORT}"
        self.insecure = [] if self.tls else ["--insecure"]  # (a private network the test made)
        self.config = {**config, "scheduler": {**config.get("scheduler", {}), "address": self.address}}
        self.env = {**(env or {}), "PYTHONPATH": str(ROOT)}
        self.scheduler: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}
        self.config_path = folder / "cluster.yaml"
        self.config_path.write_text(yaml.safe_dump(self.config))

    @property
    def shards(self) -> list[str]:
        return [s["name"] for s in self.config["shards"]]

    def _env(self) -> dict:
        return {**os.environ, **self.env}

    def start_scheduler(self, timeout_s: float = 60.0) -> None:
        self.scheduler = self.head.popen(
            [
                *PIPELINE,
                "scheduler",
                "--host",
                self.bind,
                "--port",
                str(PORT),
                "--dashboard-address",
                f"{self.bind}:{DASHBOARD}",
                "--config",
                str(self.config_path),
                *self.insecure,
                "--log-file",
                str(self.folder / "scheduler.log"),
            ],
            env=self._env(),
            cwd=self.folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.wait_for(lambda: self.identity() is not None, timeout_s, "the scheduler to answer")

    def start_worker(
        self,
        i: int,
        shard: str | None = None,
        extra: list[str] = (),
        config: Path | None = None,
        name: str | None = None,
    ) -> subprocess.Popen:
        host = self.rig[i]
        shard = shard or self.shards[i - 1]
        bind = "127.0.0.1" if self.loopback else host.address
        proc = host.popen(
            [
                *PIPELINE,
                "worker",
                self.address,
                "--shard",
                shard,
                "--host",
                bind,
                "--config",
                str(config or self.config_path),
                *self.insecure,
                "--log-file",
                str(self.folder / f"worker-h{i}.log"),
                *extra,
            ],
            env=self._env(),
            cwd=self.folder,
            stdout=subprocess.DEVNULL,
            stderr=open(self.folder / f"supervisor-h{i}.log", "a"),
        )
        self.workers[name or host.name] = proc
        return proc

    def start(self, timeout_s: float = 120.0) -> "RigCluster":
        self.start_scheduler()
        if self.loopback:
            for shard in self.shards:
                self.start_worker(0, shard=shard, name=shard)
        else:
            for i in range(1, len(self.rig)):
                self.start_worker(i)
        self.wait_for(lambda: set(self.shards) <= set(self.served()), timeout_s, "every shard's worker")
        return self

    def identity(self) -> dict | None:
        """The scheduler's identity (its workers and their resources), read over HTTP from the
        scheduler's host; None while it does not answer."""
        code = (
            f"import urllib.request,sys;sys.stdout.write(urllib.request.urlopen("
            f"'http://{self.bind}:{DASHBOARD}/json/identity.json',timeout=3).read().decode())"
        )
        done = self.head.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
        return json.loads(done.stdout) if done.returncode == 0 and done.stdout else None

    def served(self, wait_s: float = 0.0) -> dict[str, str]:
        """shard -> the address of the worker now registered for it; ``wait_s``: how long to ask
        again while the scheduler does not answer (a loaded box)."""
        deadline = time.monotonic() + wait_s
        info = self.identity()
        while info is None and time.monotonic() < deadline:
            time.sleep(1)
            info = self.identity()
        info = info or {}
        out = {}
        for addr, w in (info.get("workers") or {}).items():
            for name in w.get("resources") or {}:
                if name.startswith("shard-"):
                    out[name.removeprefix("shard-")] = addr
        return out

    def run(self, args: list, timeout_s: float = 600.0) -> subprocess.CompletedProcess:
        """``python -m pipeline run ARGS --config`` on the scheduler's host, waited for."""
        return self.head.run(
            [*PIPELINE, "run", *map(str, args), "--config", str(self.config_path), "--quiet"],
            env=self._env(),
            cwd=self.folder,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )

    def start_run(self, args: list) -> subprocess.Popen:
        return self.head.popen(
            [*PIPELINE, "run", *map(str, args), "--config", str(self.config_path), "--quiet"],
            env=self._env(),
            cwd=self.folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    @staticmethod
    def wait_for(check, timeout_s: float, what: str, every_s: float = 0.5):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(every_s)
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")

    def stop(self) -> None:
        for proc in [*self.workers.values(), self.scheduler]:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for proc in [*self.workers.values(), self.scheduler]:
            if proc is not None:
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()


def rig_config(shards: list[str], **engine) -> dict:
    """A fake-engine config for the rig's shards (each its own core here; on real hosts each
    host's own device)."""
    return {
        "scheduler": {"address": None},
        "shards": [
            {"name": s, "devices": [i % 2], "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}} for i, s in enumerate(shards)
        ],
        "engine": {"kind": "fake", **engine},
        "advanced": {
            "intake": {"max_in_flight": 4, "concurrent_batches": 2},
            "recovery": {"poll_interval_s": 0.5, "rejoin_timeout_s": 20},
            "jobs": {"bucket_rows": 200},
        },
    }


def read_output(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()
