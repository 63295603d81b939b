"""Code that runs in the user's process: the Python program that holds a ``Pipeline``, or
``python -m pipeline run``. It reads rows, routes them to shards (``router``, ``dispatch``),
keeps one job's state (``job_state``), sends batches to the workers and gathers their results
(``pipeline``), watches for lost workers (``recovery``), tokenizes prefixes (``tokenizer``) and
shows the engines' start (``start_progress``). Nothing is imported here: import the module.
"""
