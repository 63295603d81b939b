"""The tasks the Dask workers run for a job, which the client submits; nothing here imports the client's code.
Nothing is imported here."""
