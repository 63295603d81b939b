"""Which shards a machine gets (``shards: auto``) and whether a layout can run.

``shards: auto`` (the default) resolves on the machine that reads the config:
- with GPUs (``CUDA_VISIBLE_DEVICES``, else ``nvidia-smi -L``): one shard per
  ``auto_shards.gpus_per_shard`` GPUs, named gpu0, gpu1, ...; a shard of several GPUs runs its
  engine with that tensor-parallel size;
- otherwise CPU shards of ``auto_shards.cpu_cores_per_shard`` cores each (default: 1 on
  machines of up to 4 usable cores, else 4), named cpu0, cpu1, ..., each pinned to its cores;
  on machines of more than 4 usable cores the first is left to the client and the scheduler
  (``auto_shards.reserve_cores``).

``check_layout`` refuses what cannot run, one line each: a device in two shards, a device this
machine does not have, a tensor-parallel size that does not divide the shard's devices or the
model's attention heads (``Config.require_layout`` raises them as one ``ConfigError``).

It imports nothing of the pipeline: the config (pipeline/config/config_file.py) imports it to resolve
``shards: auto``, and its functions take the config as an argument.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any


def usable_cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def visible_gpus() -> list[int]:
    """GPU indices this machine offers: ``CUDA_VISIBLE_DEVICES`` when set (its positions), else
    what ``nvidia-smi -L`` lists; none without either."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = [d for d in env.split(",") if d.strip() and d.strip() != "-1"]
        return list(range(len(ids)))
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return list(range(sum(1 for line in out.splitlines() if line.startswith("GPU "))))


def auto_shards(auto: dict[str, Any], gpus: list[int] | None = None, cores: list[int] | None = None) -> list[dict]:
    """The shard list ``shards: auto`` stands for on this machine (as config mappings)."""
    gpus = visible_gpus() if gpus is None else gpus
    env = dict(auto.get("env") or {})
    if gpus:
        per = auto.get("gpus_per_shard") or 1
        return [
            {"name": f"gpu{i}", "kind": "gpu", "devices": gpus[i * per : (i + 1) * per], "env": env}
            for i in range(len(gpus) // per)
        ]
    cores = usable_cores() if cores is None else cores
    reserve = auto.get("reserve_cores")
    if reserve is None:
        reserve = 1 if len(cores) > 4 else 0
    free = cores[reserve:]
    per = auto.get("cpu_cores_per_shard") or (1 if len(cores) <= 4 else 4)
    count = max(1, len(free) // per)
    free = free if len(free) >= per else cores[:per]  # a machine smaller than one shard: one shard
    return [
        {"name": f"cpu{i}", "kind": "cpu", "devices": free[i * per : (i + 1) * per], "env": env} for i in range(count)
    ]


def model_heads(model_path: str | None) -> tuple[int, int] | None:
    """(attention heads, KV heads) from a local model folder's config.json, if readable."""
    if not model_path:
        return None
    try:
        cfg = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    heads = cfg.get("num_attention_heads")
    if not isinstance(heads, int):
        return None
    return heads, cfg.get("num_key_value_heads") or heads


def check_layout(
    config,
    model_path: str | None = None,
    *,
    local: bool = True,
    gpus: list[int] | None = None,
    cores: list[int] | None = None,
) -> list[str]:
    """One line per reason the shard layout cannot run. ``local``: the shards run on this
    machine (their devices are checked against it, and no device may be in two shards; across
    hosts, each host numbers its own devices, and a one-GPU pod or job sees its GPU as 0)."""
    problems: list[str] = []
    owner: dict[tuple[str, int], str] = {}
    for s in config.shards if local else ():
        for d in s.devices:
            other = owner.setdefault((s.kind, d), s.name)
            if other != s.name:
                what = "GPU" if s.kind == "gpu" else "core"
                problems.append(f"shards: {what} {d} is in two shards, {other} and {s.name}")
    if local:
        gpus = visible_gpus() if gpus is None else gpus
        cores = usable_cores() if cores is None else cores
        for s in config.shards:
            have, what = (gpus, "GPU") if s.kind == "gpu" else (cores, "core")
            missing = [d for d in s.devices if d not in have]
            if missing:
                shown = ", ".join(map(str, have)) or "none"
                problems.append(
                    f"shards.{s.name}: {what} {', '.join(map(str, missing))} does not exist on this "
                    f"machine ({what}s: {shown})"
                )
    heads = model_heads(model_path)
    for s in config.shards:
        tp = s.tensor_parallel
        pinned = s.env.get("VLLM_CPU_OMP_THREADS_BIND") if s.kind == "cpu" else None
        if pinned is not None:  # the ranks' cores given by hand ("0|1|0"): one part per rank
            if pinned.count("|") + 1 != tp:
                problems.append(
                    f"shards.{s.name}: env VLLM_CPU_OMP_THREADS_BIND {pinned!r} pins "
                    f"{pinned.count('|') + 1} rank(s), tensor_parallel_size is {tp}"
                )
        elif len(s.devices) % tp:
            problems.append(
                f"shards.{s.name}: tensor_parallel_size {tp} does not divide its {len(s.devices)} device(s)"
            )
        if heads is not None and tp > 1 and (heads[0] % tp or heads[1] % tp):
            fits = [n for n in range(1, heads[1] + 1) if heads[0] % n == 0 and heads[1] % n == 0]
            problems.append(
                f"shards.{s.name}: tensor_parallel_size {tp} cannot split the model's {heads[0]} "
                f"attention heads and {heads[1]} KV heads; sizes that can: "
                f"{', '.join(map(str, fits))}"
            )
    return problems


def describe(config) -> str:
    """The resolved layout, one line per shard (``check-config``)."""
    lines = []
    for s in config.shards:
        what = "GPUs" if s.kind == "gpu" else "cores"
        tp = f", tensor parallel {s.tensor_parallel}" if s.tensor_parallel > 1 else ""
        lines.append(f"  {s.name}: {s.kind}, {what} {','.join(map(str, s.devices))}{tp}")
    return "\n".join(lines)
