"""Code that runs inside each Dask worker process: the plugin that holds the shard's engine and
the batch task that feeds it (``plugin``), the engine itself (``engine``), prompt fitting,
per-shard figures and GC pauses (``prompt_fit``, ``metrics``, ``gcstats``), the watchdog the
worker starts in its own small process to stop its engine's processes if it dies (``reaper``),
and the workers' Dask preload (``preload``: shard identity, log file).
Nothing is imported here: a worker's reaper imports ``pipeline.worker.reaper`` without Dask.
"""
