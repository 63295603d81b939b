"""Code for the benchmarks, run by the benchmark's driver process (``python -m pipeline bench``,
whose options and handler are in ``cli``): the run itself (``run``), which
takes its ``options`` (the bursts' rows too), runs each of the ``contenders`` and keeps the
``summary`` of their runs, the ``env_report`` (the engines' environments side by side) and the
``machine`` it ran on; its report
(``report``), the standalone vLLM reference, one plain process per shard (``standalone``; that
process imports no Dask), where the CPU went (``cpu_share``), the least-prefill reference (``prefill_ideal``)
and the deterministic
workloads (``workloads``, also behind ``datasets/generate.py``). Nothing is imported here:
import the module.
"""
