"""The environment vLLM's engine processes start with: the user's and the shard's, not Dask's.

A shard's own variables (``shard_engine_env``): its device pin, the engine workarounds every
engine gets (``ENGINE_ENV_DEFAULTS``), and the shard's ``env`` from the config.

Before it spawns a worker, Dask's nanny writes ``distributed.nanny.pre-spawn-environ``
(``MALLOC_TRIM_THRESHOLD_=65536``, ``OMP/MKL/OPENBLAS_NUM_THREADS=1``) and
``PYTHONHASHSEED`` into ``os.environ`` of the process that owns the nanny (for an embedded
cluster: the user's own process), so that the worker process starts with them. vLLM's
engine-core and model-runner processes are spawned by the worker and would inherit them.
They must not: with ``MALLOC_TRIM_THRESHOLD_`` set at all, glibc turns off its dynamic mmap
threshold, every large buffer of every engine step is mmapped and unmapped again, and plain
vLLM on CPU ran 7.0 instead of 10.6-11.4 req/s (docs/configuration.md, "The engine's environment").

So, per variable (decided from measurement, see docs/configuration.md):
  * the Dask worker process keeps what the nanny gives it (Dask's memory trimming and
    single-threaded BLAS are for the worker's own data work);
  * the engine processes get none of it, unless the user's environment had that variable
    already or the shard's ``env`` sets it: they start with what a plain vLLM process
    started from the user's shell would have, plus the shard's variables.

How a worker tells Dask's variables from the user's: the process that starts the nannies
records, before they start, which of these variables its environment lacks
(``PIPELINE_DASK_ADDED_ENV``, passed in every worker's environment, so it holds for
workers a nanny restarts too). A worker started by ``dask worker`` without that record
treats a variable holding exactly Dask's default value as Dask's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from contextlib import contextmanager

import dask

from pipeline.names import ADDED_RECORD_ENV as ADDED_RECORD

# Every engine's environment unless the shard's ``env`` says otherwise.
ENGINE_ENV_DEFAULTS = {
    # vLLM 0.32 on torch 2.13 cannot load its AOT-compiled artifact ("'function' object has no
    # attribute 'finalize_loading'") and recompiles at every start; without AOT compilation a
    # compiled engine loads torch.compile's cache instead (docs/configuration.md, "Engine start").
    "VLLM_USE_AOT_COMPILE": "0",
    # vLLM names its processes with setproctitle, which by default overwrites the area the
    # kernel shows as /proc/<pid>/environ (seen: the engine core's read back empty or cut). With
    # SPT_NOENV the title stays within the command line and the engine's environment can be read
    # (the environment test and the benchmark's side-by-side report read it).
    "SPT_NOENV": "1",
}


def shard_engine_env(kind: str, devices: list[int], tensor_parallel: int, env: dict[str, str]) -> dict[str, str]:
    """A shard's engine variables: its devices (a CPU shard's cores split between its ranks,
    "0-1|2-3"; a GPU shard's ``CUDA_VISIBLE_DEVICES``), ``ENGINE_ENV_DEFAULTS``, and the shard's
    own ``env`` over both."""
    out = {}
    if kind == "cpu" and "VLLM_CPU_OMP_THREADS_BIND" not in env:  # (else pinned by hand)
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


_HASH_SEED = ("PYTHONHASHSEED", "6640")  # the nanny sets it when unset or "0" (distributed/nanny.py)
# Also written by a nanny (or `dask worker`) into its own process, never the user's: the
# process-title marker. Engines never get it.
NANNY_WRITES = ("__DASK_PARENT_PID",)


def dask_pre_spawn() -> dict[str, str]:
    """What a nanny would write into the environment before spawning a worker, by default."""
    cfg = dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {}
    out = {k: str(v) for k, v in cfg.items() if v is not None}
    out.setdefault(*_HASH_SEED)
    return out


def added_by_dask(environ: Mapping[str, str]) -> list[str]:
    """In a process about to start nannies: the nanny variables its environment lacks (so a
    nanny would add them). ``PYTHONHASHSEED=0`` is replaced by the nanny, so it counts."""
    return sorted(k for k in dask_pre_spawn() if k not in environ or (k == _HASH_SEED[0] and environ[k] == "0"))


def worker_record(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variable to pass in every worker's environment (see the module docstring)."""
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
    """``os.environ`` without Dask's variables while the engine's processes are spawned;
    this process's own values come back afterwards. Yields the variables held back."""
    held = {k: os.environ.pop(k) for k in engine_drop(os.environ, keep)}
    try:
        yield held
    finally:
        for k, v in held.items():
            os.environ.setdefault(k, v)


def process_environ() -> dict[str, str]:
    """This process's environment as a child it spawns inherits it: the C library's
    ``environ``. It can hold variables that ``os.environ`` never sees: GNU readline sets
    ``COLUMNS`` and ``LINES`` there when it loads (under pytest, in an interactive session),
    and Dask's nanny spawns its workers with it."""
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
    """This process's environment now, to ``restore`` later."""
    return dict(os.environ)


def restore(saved: Mapping[str, str], keys: Iterable[str] | None = None) -> list[str]:
    """Put ``keys`` (default: every variable) back as they were in ``saved``; returns those
    that had changed. A nanny writes Dask's worker variables into the environment of the
    process that owns it (the user's, for an embedded cluster) at every worker (re)start."""
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
    """A process's environment as it started (``/proc/<pid>/environ``; what glibc and the
    OpenMP runtime read at start-up, whatever the process changed in ``os.environ`` later)."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        raw = f.read()
    out = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def engine_processes(root_pid: int) -> dict[int, str]:
    """pid -> process name of vLLM's processes below ``root_pid`` (``VLLM::EngineCore``,
    ``VLLM::Worker...``)."""
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
