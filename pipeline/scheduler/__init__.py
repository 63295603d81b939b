"""Code that runs inside the Dask scheduler process, loaded there by the scheduler's preload
(``preload``: ``dask scheduler --preload pipeline.scheduler.preload``; the embedded and the
resident cluster start their scheduler with it): the pipeline's dashboard pages (``dashboard``:
the table and JSON; ``dashboard_plots``: the Bokeh plots on the Dask dashboard) and the history
the plots draw from (``history``). Nothing is imported here: import the module.
"""
