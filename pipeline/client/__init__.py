"""Code that runs in the user's process: the Python program that holds a ``Pipeline``, or
``python -m pipeline run``. The ``pipeline`` (start the cluster and engines, ``run``/``stream``
over a Python iterable: ``iterable_job``; ``map_dataframe``: ``dataframes``) and loading the
tokenizer (``tokenizer``). Every job runs on the cluster (pipeline/jobs/cluster_job.py).
Nothing is imported here: import the module.
"""
