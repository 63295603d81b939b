"""The engines' real environment, read from /proc/<pid>/environ: none of the variables Dask's
nanny writes for its workers (MALLOC_TRIM_THRESHOLD_ made plain vLLM ~35 % slower), all of the
shard's own. The Dask worker process keeps Dask's variables."""

import os

from pipeline import engine_env


def _engine_envs(pipeline):
    stats = {s["shard"]: s for s in pipeline.worker_stats()}
    out = {}
    for shard, s in stats.items():
        procs = engine_env.engine_processes(s["pid"])
        out[shard] = (s["pid"], {pid: (name, engine_env.read_environ(pid)) for pid, name in procs.items()})
    return out


def test_engine_processes_start_without_dasks_worker_variables(pipeline):
    dask_only = engine_env.added_by_dask(os.environ)  # what this process's environment lacks
    assert "MALLOC_TRIM_THRESHOLD_" in dask_only, "the test needs an environment without it"
    envs = _engine_envs(pipeline)
    assert set(envs) == set(pipeline.config.shard_names)
    for shard in pipeline.config.shards:
        worker_pid, procs = envs[shard.name]
        names = sorted(name for name, _ in procs.values())
        assert any(n.startswith("VLLM::EngineCore") for n in names), names
        assert any(n.startswith("VLLM::Worker") for n in names), names  # the model runner
        for pid, (name, env) in procs.items():
            leaked = sorted(k for k in dask_only if k in env)
            if name.startswith("VLLM::Worker"):
                # vLLM's engine core sets this for its model runners itself: one thread per
                # pinned core (vllm/utils/ompmultiprocessing.py), as it does in plain vLLM.
                assert env.get("OMP_NUM_THREADS") == str(
                    len(shard.worker_env()["VLLM_CPU_OMP_THREADS_BIND"].split(","))
                )
                leaked = [k for k in leaked if k != "OMP_NUM_THREADS"]
            assert not leaked, f"{shard.name} {name} (pid {pid}) inherited Dask's {leaked}"
            # Whatever its value, this one turns off glibc's dynamic mmap threshold (~35 % slower).
            assert "MALLOC_TRIM_THRESHOLD_" not in env or "MALLOC_TRIM_THRESHOLD_" in os.environ
            for k, v in shard.worker_env().items():  # pin, KV space, compile settings
                assert env.get(k) == v, f"{shard.name} {name}: {k}={env.get(k)!r}, want {v!r}"
        # The Dask worker process itself keeps what its nanny gave it.
        worker = engine_env.read_environ(worker_pid)
        assert worker.get("MALLOC_TRIM_THRESHOLD_") == "65536"
