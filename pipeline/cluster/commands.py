"""``python -m pipeline up`` / ``status`` / ``down``: the resident local cluster's commands as
the user sees them (what they print, their exit codes). The work is in ``resident``."""
from __future__ import annotations

import json
import time
from dataclasses import asdict

from pipeline.cluster import resident
from pipeline.cluster.resident_state import cluster_dir
from pipeline.config import Config
from pipeline.console import live_line, notify, quiet_logs
from pipeline.model import model_for


def up(config: Config) -> int:
    quiet_logs()
    t0 = time.perf_counter()
    model = model_for(config, config.engine.kind)
    config.require_layout(model if config.engine.kind == "vllm" else None)
    state, started = resident.up(config, model, notify, live_line())
    if not started:
        print(f"the local cluster is already up at {state.address} (since {time.ctime(state.started)})")
        return 0
    print(f"cluster up in {time.perf_counter() - t0:.1f} s: {len(config.shards)} shards at {state.address}"
          + (f"; dashboard: {state.dashboard}" if state.dashboard else "")
          + "\n`python -m pipeline run ...` with this config uses it; `python -m pipeline down` stops it")
    return 0


def down(config: Config) -> int:
    if resident.down(config, notify):
        print("the local cluster is stopped")
    else:
        print(f"no local cluster is running (no state in {cluster_dir(config)})")
    return 0


def status(config: Config, as_json: bool = False) -> int:
    """The cluster's shards as a table (or JSON); exit code 1 when its state was stale."""
    info = resident.status(config)
    if info is None:
        print("null" if as_json else f"no local cluster is running (no state in {cluster_dir(config)})")
        return 0
    state = info["state"]
    if as_json:
        print(json.dumps({**info, "state": asdict(state), "uptime_s": state.uptime_s}, indent=2, default=str))
        return 1 if info["stale"] else 0
    if info["stale"]:
        print(f"the local cluster recorded in {info['folder']} is no longer running (gone: "
              f"{', '.join(info['dead']) or 'its scheduler does not answer'}); what was left of it is stopped and "
              f"its state removed")
        return 1
    print(f"local cluster at {state.address}, up {state.uptime_s / 60:.1f} min"
          + (f"; dashboard: {state.dashboard}" if state.dashboard else "") + f"; logs: {state.log_dir}/")
    print(status_table(config.shard_names, info["shards"]))
    return 0


def status_table(shard_names: list[str], shards: dict[str, dict]) -> str:
    """One line per shard: its engine's phase, pid, start time, requests, prompt tokens, the
    prefix-cache hit share and the documents it holds."""
    lines = [f"{'shard':<10} {'engine':<9} {'pid':>7} {'start s':>8} {'requests':>9} {'prompt tok':>11} "
             f"{'cached':>7}  documents"]
    for name in shard_names:
        s = shards.get(name)
        if s is None:
            lines.append(f"{name:<10} {'no worker':<9}")
            continue
        m = s.get("metrics") or {}
        start = f"{s['start_s']:.1f}" if s.get("start_s") else "-"
        lines.append(f"{name:<10} {s['phase']:<9} {s['pid']:>7} {start:>8} {m.get('requests', 0):>9} "
                     f"{m.get('prompt_tokens', 0):>11} {m.get('cache_hit_share', 0):>7.1%}  {s.get('documents', 0)}")
    return "\n".join(lines)
