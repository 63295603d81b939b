"""Code that runs inside the Dask scheduler process, loaded by the scheduler preload: the dashboard pages, the
history they draw from and the shard claims. Nothing is imported here."""
