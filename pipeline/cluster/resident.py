"""The resident local cluster: started by ``python -m pipeline up``, used by later runs with the
same config, stopped by ``down``. Its processes run in their own sessions so they outlive the
terminal. A state file records where it runs and the fingerprint of its config; a config that
differs is refused with the differences rather than silently reusing workers built for another."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Callable

import psutil
import yaml
from distributed import Client

from pipeline.cluster.engines import start_engines, wait_for_shard_workers
from pipeline.cluster.local import apply_dask_settings, process_env, read_scheduler_file, scheduler_command, spawn
from pipeline.cluster.resident_state import (
    STATE_FILE,
    ClusterMismatch,
    ClusterState,
    cluster_dir,
    differences,
    fingerprint,
)
from pipeline.cluster.security import dask_security
from pipeline.cluster.worker_spec import WorkerSpec
from pipeline.config import Config
from pipeline.worker.queries import engine_phase, stop_engine, worker_stats


def find(config: Config, model: str, notify: Callable[[str], None]) -> ClusterState | None:
    """The resident cluster for ``config``, or None. A stale state file is removed; a cluster up for
    another config raises ClusterMismatch."""
    folder = cluster_dir(config)
    state = ClusterState.load(folder)
    if state is None:
        return None
    stale = state.stale_reason()
    if stale:
        notify(
            f"the local cluster recorded in {folder / STATE_FILE} is no longer running ({stale}); "
            f"starting an embedded one"
        )
        _discard(state, folder)
        return None
    diff = differences(state.fingerprint, fingerprint(config, model))
    if diff:
        raise ClusterMismatch(
            f"a local cluster is up at {state.address} for another config ({state.config_file}); it differs in:\n  "
            + "\n  ".join(diff)
            + "\nuse that config, or stop the cluster first: python -m pipeline down"
        )
    return state


def start_processes(config: Config, model: str, folder: Path) -> ClusterState:
    """Start the scheduler and one ``dask worker`` per shard, without engines."""
    folder.mkdir(parents=True, exist_ok=True)
    log_dir = folder / "logs"
    log_dir.mkdir(exist_ok=True)
    config_file = folder / "config.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    scheduler_file = folder / "scheduler.json"
    scheduler_file.unlink(missing_ok=True)
    base_env = process_env(config)
    procs: dict[str, subprocess.Popen] = {}

    def start(name: str, args: list[str], env: dict) -> None:
        with open(log_dir / f"{name}.log", "w") as out:
            # A session of its own, so neither Ctrl-C nor closing the terminal that ran `up` stops it.
            procs[name] = spawn(args, env, out, cwd=folder, start_new_session=True)

    try:
        start("scheduler", scheduler_command(config, scheduler_file), base_env)
        info = read_scheduler_file(scheduler_file, procs["scheduler"], log_dir / "scheduler.log", 60)
        # starter_env tells each worker which variables its nanny adds, so its engine starts without them.
        for shard in config.shards:
            worker = WorkerSpec(config, shard, starter_env=base_env)
            start(shard.name, worker.command(info["address"]), worker.process_env(base_env))
    except BaseException:
        for p in procs.values():
            _each(reversed(_tree(p.pid)), psutil.Process.kill)
        raise
    board = info.get("services", {}).get("dashboard") if config.scheduler.dashboard_address else None
    return ClusterState(
        address=info["address"],
        dashboard=f"http://{config.scheduler.host}:{board}/status" if board else None,
        config_file=str(config_file),
        fingerprint=fingerprint(config, model),
        processes={name: [p.pid, psutil.Process(p.pid).create_time()] for name, p in procs.items()},
        log_dir=str(log_dir),
    )


def _tree(pid: int, created: float | None = None) -> list[psutil.Process]:
    try:
        p = psutil.Process(pid)
        if created is not None and abs(p.create_time() - created) >= 1e-3:
            return []
        return [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _each(procs, act: Callable[[psutil.Process], None]) -> None:
    for p in procs:
        try:
            act(p)
        except psutil.NoSuchProcess:
            pass


def cluster_processes(state: ClusterState) -> list[psutil.Process]:
    return [p for pid, created in state.processes.values() for p in _tree(pid, created)]


def _discard(state: ClusterState, folder: Path) -> None:
    _stop_processes(state)
    (folder / STATE_FILE).unlink(missing_ok=True)


def _stop_processes(state: ClusterState) -> None:
    """SIGTERM every process of the cluster, SIGKILL what outlives 10 s."""
    procs = cluster_processes(state)
    _each(procs, psutil.Process.terminate)
    _, alive = psutil.wait_procs(procs, timeout=10)
    _each(alive, psutil.Process.kill)
    psutil.wait_procs(alive, timeout=5)


def up(
    config: Config, model: str, notify: Callable[[str], None], live: Callable[[str], None] | None = None
) -> tuple[ClusterState, bool]:
    """Start the resident cluster and wait for every engine; returns its state and False if it was up already."""
    folder = cluster_dir(config)
    running = find(config, model, notify)
    if running is not None:
        return running, False
    state = start_processes(config, model, folder)
    notify(f"scheduler at {state.address}; logs in {state.log_dir}/")
    try:
        apply_dask_settings(config)
        with Client(state.address, security=dask_security(config), timeout=30) as client:
            wait_for_shard_workers(client, config, 600)
            start_engines(client, config, model, config.engine.kind, notify, live, logs=state.log_dir)
    except BaseException:
        _stop_processes(state)
        raise
    state.save(folder)
    return state, True


def down(config: Config, notify: Callable[[str], None]) -> bool:
    """Stop the engines first so each engine core exits cleanly, then Dask's processes, killing
    whatever outlives a minute. Returns False if none was up."""
    folder = cluster_dir(config)
    state = ClusterState.load(folder)
    if state is None:
        return False
    procs = cluster_processes(state)
    alive = procs
    if state.scheduler_reachable():
        outcome: list = []

        def through_scheduler() -> None:
            try:
                with Client(state.address, security=dask_security(config), timeout=10) as client:
                    client.run(stop_engine, on_error="return")
                    client.shutdown()  # the scheduler closes its workers and their nannies
                outcome.append(None)
            except Exception as exc:  # noqa: BLE001 - stopping anyway, by signal
                outcome.append(exc)

        # A scheduler that accepts connections but never answers must not hold `down` up.
        t = threading.Thread(target=through_scheduler, name="pipeline-down", daemon=True)
        t.start()
        t.join(30)
        if outcome and outcome[0] is None:
            _, alive = psutil.wait_procs(procs, timeout=60)
        else:
            why = f"{type(outcome[0]).__name__}: {outcome[0]}" if outcome else "no answer within 30 s"
            notify(f"could not stop the cluster through its scheduler ({why}); stopping its processes")
    alive = [p for p in alive if p.is_running()]
    if alive:
        notify(f"{len(alive)} process(es) of the cluster still running: stopping them")
        _stop_processes(state)
    (folder / STATE_FILE).unlink(missing_ok=True)
    return True


def status(config: Config) -> dict | None:
    """The resident cluster as its workers report it, or None; a stale state file is removed."""
    folder = cluster_dir(config)
    state = ClusterState.load(folder)
    if state is None:
        return None
    out: dict = {"state": state, "folder": str(folder), "dead": state.dead_processes(), "shards": {}}
    if state.stale_reason():
        _discard(state, folder)
        out["stale"] = True
        return out
    with Client(state.address, security=dask_security(config), timeout=10) as client:
        phases = client.run(engine_phase, on_error="return")
        stats = client.run(worker_stats, on_error="return")
    for addr, phase in phases.items():
        if isinstance(phase, dict) and phase.get("shard"):
            s = stats.get(addr)
            out["shards"][phase["shard"]] = {**phase, "worker": addr, **(s if isinstance(s, dict) else {})}
    out["stale"] = False
    return out
