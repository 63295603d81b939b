"""Code for the benchmarks, run by the benchmark's driver process (``python -m pipeline bench``
/ ``router-bench``): the run itself (``run``), its report (``report``), the standalone vLLM
reference, one plain process per shard (``standalone``; that process imports no Dask), the
router micro-benchmark (``router_bench``), the least-prefill reference (``prefill_ideal``) and
the deterministic workloads (``workloads``, also behind ``datasets/generate.py``). Nothing is
imported here: import the module.
"""
