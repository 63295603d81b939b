"""Code that runs inside each Dask worker process. Nothing is imported here, so the reaper can import
``pipeline.worker.reaper`` without Dask."""
