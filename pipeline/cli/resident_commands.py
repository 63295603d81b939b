"""``python -m pipeline up``, ``status`` and ``down`` as the user sees them."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

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
    print(
        f"cluster up in {time.perf_counter() - t0:.1f} s: {len(config.shards)} shards at {state.address}"
        + (f"; dashboard: {state.dashboard}" if state.dashboard else "")
        + "\n`python -m pipeline run ...` with this config uses it; `python -m pipeline down` stops it"
    )
    return 0


def down(config: Config) -> int:
    if resident.down(config, notify):
        print("the local cluster is stopped")
    else:
        print(f"no local cluster is running (no state in {cluster_dir(config)})")
    return 0


def status(config: Config, as_json: bool = False, store: str | None = None) -> int:
    """The cluster's shards and any stored batches; exit code 1 when the cluster's state was stale."""
    from pipeline.service.store import default_root, stored_batches

    root = Path(store).expanduser() if store else default_root(config)
    batches = stored_batches(root)
    info = resident.status(config)
    if as_json:
        shown = None if info is None else {**info, "state": asdict(info["state"]), "uptime_s": info["state"].uptime_s}
        if batches:
            shown = {**(shown or {}), "batches": [{k: b.get(k) for k in BATCH_KEYS} for b in batches]}
        print(json.dumps(shown, indent=2, default=str))
        return 1 if info is not None and info["stale"] else 0
    code = _cluster_status(config, info)
    if batches:
        print(f"\nbatches in {root} (python -m pipeline serve):\n{batch_table(batches)}")
    return code


BATCH_KEYS = ("id", "status", "request_counts", "created_at", "endpoint")
BATCH_ROWS = 20  # the newest batches shown; the others counted


def batch_table(batches: list[dict]) -> str:
    """One line per batch, newest first."""
    lines = [f"{'batch':<30} {'status':<11} {'completed':>9} {'failed':>7} {'total':>7}  created"]
    for b in batches[:BATCH_ROWS]:
        c = b.get("request_counts") or {}
        lines.append(
            f"{b['id']:<30} {b['status']:<11} {c.get('completed', 0):>9} {c.get('failed', 0):>7} "
            f"{c.get('total', 0):>7}  {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(b['created_at']))}"
        )
    if len(batches) > BATCH_ROWS:
        lines.append(f"... and {len(batches) - BATCH_ROWS} older (GET /v1/batches lists them all)")
    return "\n".join(lines)


def _cluster_status(config: Config, info: dict | None) -> int:
    if info is None:
        print(f"no local cluster is running (no state in {cluster_dir(config)})")
        return 0
    state = info["state"]
    if info["stale"]:
        print(
            f"the local cluster recorded in {info['folder']} is no longer running (gone: "
            f"{', '.join(info['dead']) or 'its scheduler does not answer'}); what was left of it is stopped and "
            f"its state removed"
        )
        return 1
    print(
        f"local cluster at {state.address}, up {state.uptime_s / 60:.1f} min"
        + (f"; dashboard: {state.dashboard}" if state.dashboard else "")
        + f"; logs: {state.log_dir}/"
    )
    print(status_table(config.shard_names, info["shards"]))
    return 0


def status_table(shard_names: list[str], shards: dict[str, dict]) -> str:
    lines = [
        f"{'shard':<10} {'engine':<9} {'pid':>7} {'start s':>8} {'requests':>9} {'prompt tok':>11} "
        f"{'cached':>7}  documents"
    ]
    for name in shard_names:
        s = shards.get(name)
        if s is None:
            lines.append(f"{name:<10} {'no worker':<9}")
            continue
        m = s.get("metrics") or {}
        start = f"{s['start_s']:.1f}" if s.get("start_s") else "-"
        lines.append(
            f"{name:<10} {s['phase']:<9} {s['pid']:>7} {start:>8} {m.get('requests', 0):>9} "
            f"{m.get('prompt_tokens', 0):>11} {m.get('cache_hit_share', 0):>7.1%}  {s.get('documents', 0)}"
        )
    return "\n".join(lines)
