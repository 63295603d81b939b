"""The bench's environment report: how the pipeline's engine processes' environments differ
from the plain-vLLM reference's, read from ``/proc``."""

from __future__ import annotations

from pipeline import engine_env

# Variables that change how an engine runs, shown side by side in the report.
WATCHED_ENV = (
    "MALLOC_TRIM_THRESHOLD_",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "PYTHONHASHSEED",
    "VLLM_CPU_OMP_THREADS_BIND",
    "VLLM_CPU_KVCACHE_SPACE",
    "VLLM_USE_AOT_COMPILE",
    "LD_PRELOAD",
)


def engine_env_report(pipeline, shards) -> dict:
    """Per shard and vLLM process (engine core, model runner): how the pipeline's engine
    environment differs from the plain-vLLM reference's, read from /proc/<pid>/environ
    (``PIPELINE_*`` left out), and the watched variables of each."""
    workers = {s["shard"]: s["pid"] for s in pipeline.worker_stats()}
    out: dict = {}
    for shard in shards.shards:
        sides: dict[str, dict[str, tuple[int, dict[str, str]]]] = {}  # side -> process name -> (pid, environ)
        for side, root in (("pipeline", workers.get(shard)), ("standalone", shards.pid_of(shard))):
            procs = engine_env.engine_processes(root) if root else {}
            sides[side] = {}
            for pid, name in sorted(procs.items()):
                try:
                    sides[side].setdefault(name, (pid, engine_env.read_environ(pid)))
                except OSError:
                    continue
        per_proc = {}
        for name in sorted(set(sides["pipeline"]) | set(sides["standalone"])):
            (ppid, penv), (spid, senv) = (
                sides["pipeline"].get(name, (None, {})),
                sides["standalone"].get(name, (None, {})),
            )
            d = engine_env.env_diff(penv, senv)
            per_proc[name] = {
                "pipeline_pid": ppid,
                "standalone_pid": spid,
                "only_pipeline": d["only_a"],
                "only_standalone": d["only_b"],
                "differ": d["differ"],
                "watched": {k: [penv.get(k), senv.get(k)] for k in WATCHED_ENV},
            }
        out[shard] = per_proc
    return out


def print_engines(stats: list[dict], plain_settings: dict, envs: dict) -> None:
    """Both contenders' engine settings (``stats``: the pipeline's ``worker_stats``) and how their
    engine environments differ (``envs``: ``engine_env_report``), for a side-by-side bench's output."""
    print("engine settings, pipeline:", {s["shard"]: s.get("engine_settings") for s in stats})
    print("engine settings, plain vLLM:", plain_settings)
    for shard, procs in envs.items():
        for name, p in procs.items():
            diffs = {**p["only_pipeline"], **p["only_standalone"], **p["differ"]}
            print(
                f"engine environment {shard} {name}: pids {p['pipeline_pid']} / {p['standalone_pid']}, "
                f"differences: {diffs or 'none'}"
            )
