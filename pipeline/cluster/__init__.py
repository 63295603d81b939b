"""Code that starts and operates clusters, run by the process that starts them: the user's
process for the embedded cluster and for connecting to a scheduler (``local``), ``python -m
pipeline up`` / ``status`` / ``down`` for the resident cluster (``resident``), both for TLS from
the config (``security``). The pipeline's dashboard pages (``dashboard``: the table and JSON;
``dashboard_plots``: the Bokeh plots, drawn from ``history``) are served by the scheduler, which
loads them through the preload. Nothing is imported here: import the module.
"""
