"""Code that starts and operates clusters, run by the process that starts them: the user's
process for the embedded cluster and for connecting to a scheduler (``local``), ``python -m
pipeline up`` / ``status`` / ``down`` for the resident cluster (``commands``: what they print;
``resident``: its processes; ``resident_state``: its state file and config fingerprint). Both
start each shard's worker from one description (``worker_spec``) and its engine the same way
(``engines``, showing the start with ``start_progress``); ``layout`` resolves ``shards: auto``
and checks a layout can run; ``security`` is TLS from the config. What runs inside the
scheduler is in ``pipeline.scheduler``. Nothing is imported here: import the module.
"""
