"""Code that starts and operates clusters, run by the process that starts them: the user's
process for the embedded cluster and for connecting to a scheduler (``local``), ``python -m
pipeline up`` / ``status`` / ``down`` for the resident cluster (``resident``), both for TLS from
the config (``security``). The pipeline's dashboard page (``dashboard``) is served by the
scheduler, which loads it through the preload. Nothing is imported here: import the module.
"""
