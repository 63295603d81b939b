"""The benchmark behind ``python -m pipeline bench``: the pipeline side by side with plain vLLM.

``run`` drives it, ``contenders`` runs one contender on one burst, ``standalone`` is the plain vLLM
reference (a process per shard that imports no Dask), and ``report`` writes the results. Nothing is
imported here: import the module you need."""
