"""The environment vLLM's engine processes start with: the user's and the shard's, not Dask's.

A nanny writes Dask's pre-spawn variables into its owner's environment, and the engine processes
would inherit them from the worker. With ``MALLOC_TRIM_THRESHOLD_`` set at all, glibc turns off
its dynamic mmap threshold and every engine step maps and unmaps its large buffers again, so the
engines drop those variables unless the user or the shard set them. The process that starts the
nannies records which ones its environment lacked; without that record, a variable holding
exactly Dask's default counts as Dask's."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from contextlib import contextmanager

import dask

from pipeline.names import ADDED_RECORD_ENV as ADDED_RECORD

# Every engine's environment unless the shard's ``env`` says otherwise.
ENGINE_ENV_DEFAULTS = {
    # vLLM 0.32 on torch 2.13 cannot load its AOT-compiled artifact and recompiles at every start;
    # without AOT compilation it loads torch.compile's cache instead.
    "VLLM_USE_AOT_COMPILE": "0",
    # vLLM's setproctitle would overwrite the area shown as /proc/<pid>/environ; this keeps the
    # engine's environment readable.
    "SPT_NOENV": "1",
}


def shard_engine_env(kind: str, devices: list[int], tensor_parallel: int, env: dict[str, str]) -> dict[str, str]:
    """A shard's engine variables: its devices, ``ENGINE_ENV_DEFAULTS``, and the shard's own ``env``
    over both. A CPU shard's cores are split between its tensor-parallel ranks."""
    out = {}
    if kind == "cpu" and "VLLM_CPU_OMP_THREADS_BIND" not in env:  # else pinned by hand
        per = max(1, len(devices) // tensor_parallel)
        out["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(
            _cores(devices[r * per : (r + 1) * per]) for r in range(tensor_parallel)
        )
    elif kind == "gpu":
        out["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, devices))
    return {**out, **ENGINE_ENV_DEFAULTS, **env}


def _cores(cores: list[int]) -> str:
    """vLLM's CPU binding syntax: "0-3" for a contiguous range, else "0,2,5"."""
    if cores == list(range(cores[0], cores[0] + len(cores))) and len(cores) > 1:
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(map(str, cores))


_HASH_SEED = ("PYTHONHASHSEED", "6640")  # the nanny sets it when unset or "0"
# A nanny also writes its process-title marker into its own process; engines never get it.
NANNY_WRITES = ("__DASK_PARENT_PID",)


def dask_pre_spawn() -> dict[str, str]:
    """What a nanny writes into the environment before spawning a worker, by default."""
    cfg = dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {}
    out = {k: str(v) for k, v in cfg.items() if v is not None}
    out.setdefault(*_HASH_SEED)
    return out


def added_by_dask(environ: Mapping[str, str]) -> list[str]:
    """The nanny variables lacking in a process about to start nannies. A nanny replaces
    ``PYTHONHASHSEED=0``, so that counts as lacking."""
    return sorted(k for k in dask_pre_spawn() if k not in environ or (k == _HASH_SEED[0] and environ[k] == "0"))


def worker_record(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The record of Dask's variables, to pass in every worker's environment."""
    return {ADDED_RECORD: ",".join(added_by_dask(os.environ if environ is None else environ))}


def engine_drop(environ: Mapping[str, str], keep: Iterable[str] = ()) -> list[str]:
    """The variables of ``environ`` (a worker's) that the engine processes must not inherit."""
    keep = set(keep)
    if ADDED_RECORD in environ:
        dask_keys = [k for k in environ[ADDED_RECORD].split(",") if k]
    else:  # a worker started by hand: a variable holding exactly Dask's default is Dask's
        dask_keys = [k for k, v in dask_pre_spawn().items() if environ.get(k) == v]
    dask_keys += NANNY_WRITES
    return [k for k in dict.fromkeys(dask_keys) if k in environ and k not in keep]


@contextmanager
def engine_environment(keep: Iterable[str] = ()):
    """``os.environ`` without Dask's variables while the engines spawn; yields those held back."""
    held = {k: os.environ.pop(k) for k in engine_drop(os.environ, keep)}
    try:
        yield held
    finally:
        for k, v in held.items():
            os.environ.setdefault(k, v)


def process_environ() -> dict[str, str]:
    """This process's environment as a child inherits it: the C library's ``environ``, which can
    hold variables ``os.environ`` never sees, such as the ``COLUMNS`` that readline sets."""
    import ctypes

    env = ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), "environ")
    out, i = {}, 0
    while env[i] is not None:
        key, sep, value = env[i].decode(errors="replace").partition("=")
        if sep:
            out[key] = value
        i += 1
    return out


def snapshot() -> dict[str, str]:
    return dict(os.environ)


def restore(saved: Mapping[str, str], keys: Iterable[str] | None = None) -> list[str]:
    """Put ``keys``, by default all, back as they were in ``saved``; returns those that had changed."""
    keys = set(saved) | set(os.environ) if keys is None else set(keys)
    changed = []
    for k in sorted(keys):
        v = saved.get(k)
        if os.environ.get(k) != v:
            changed.append(k)
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return changed


def nanny_keys() -> list[str]:
    return sorted({*dask_pre_spawn(), *NANNY_WRITES})


def read_environ(pid: int) -> dict[str, str]:
    """A process's environment as it started, which is what glibc and OpenMP read."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        raw = f.read()
    out = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def engine_processes(root_pid: int) -> dict[int, str]:
    """pid -> name of vLLM's processes below ``root_pid``."""
    import psutil

    out: dict = {}
    try:
        children = psutil.Process(root_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return out
    for p in children:
        try:
            name = p.name()
            if name.startswith("VLLM"):
                out[p.pid] = name
        except psutil.Error:
            continue
    return out


def env_diff(a: Mapping[str, str], b: Mapping[str, str], ignore_prefixes: tuple[str, ...] = ("PIPELINE_",)) -> dict:
    """Variables only in ``a``, only in ``b``, and set in both with different values."""

    def keep(k: str) -> bool:
        return not k.startswith(ignore_prefixes)

    return {
        "only_a": {k: a[k] for k in sorted(a) if k not in b and keep(k)},
        "only_b": {k: b[k] for k in sorted(b) if k not in a and keep(k)},
        "differ": {k: (a[k], b[k]) for k in sorted(a) if k in b and a[k] != b[k] and keep(k)},
    }
