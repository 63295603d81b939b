"""The pipeline's live plots as a Bokeh page, ``/pipeline``, on the Dask dashboard.

The plots are drawn from the scheduler's ``History``, so a page opened mid-job starts with what came before, and
each open page streams new points every second. Dask builds its own Bokeh application while the scheduler is
constructed, before a preload's ``dask_setup`` runs, so ``register`` adds a second one beside it for this page and
links it from Dask's navigation bar."""

from __future__ import annotations

import html
import math
import weakref

from bokeh.layouts import column, row
from bokeh.models import ColumnDataSource, DataRange1d, Div, NumeralTickFormatter, Range1d  # type: ignore[attr-defined]
from bokeh.palettes import Category10_10
from bokeh.plotting import figure
from bokeh.server.server import BokehTornado
from tornado.ioloop import IOLoop

from pipeline.scheduler.history import JOB_COLUMNS, RATE_WINDOW_S, SHARD_COLUMNS, History, HistoryPlugin

PATH = "/pipeline"
NAV_PAGE = "pipeline"  # its entry in the navigation bar of Dask's pages
UPDATE_MS = 1000  # the history gains a point a second

# (figure name, title, y axis label, column, y range 0..1)
SHARD_FIGURES = [
    ("requests", "Requests/s per shard", "requests / s", "requests_per_s", False),
    ("output-tokens", "Output tokens/s per shard", "tokens / s", "output_tokens_per_s", False),
    (
        "cache-hits",
        f"Prefix-cache hit share per shard (prompt tokens of the last {RATE_WINDOW_S:.0f} s)",
        "share",
        "cache_hit_share",
        True,
    ),
    (
        "engine-busy",
        "Engine busy share per shard (time with a request in the engine)",
        "share",
        "engine_busy_share",
        True,
    ),
]

_apps: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # scheduler -> the page's Bokeh application


class PipelinePlots:
    """The page's figures; ``update`` streams the points sampled since the last one. Sources are named
    ``pipeline-shard-<shard>`` and ``pipeline-job``, with ``time`` in ms since the epoch."""

    def __init__(self, history: History):
        self.history = history
        self.seq = 0  # the history's last sample this page shows
        self.sources: dict[str, ColumnDataSource] = {}
        self.job_source = ColumnDataSource({c: [] for c in ("time", *JOB_COLUMNS)}, name="pipeline-job")
        x_range = DataRange1d(range_padding=0)  # shared: the plots' time axes move together
        self.figures = {}
        for name, title, label, _, share in SHARD_FIGURES + [
            ("load", "Requests in flight (solid) and queued (dashed) per shard", "requests", None, False),
            ("progress", "Job progress", "rows", None, False),
        ]:
            self.figures[name] = self._figure(name, title, label, x_range, share)
        progress = self.figures["progress"]
        for y, color, dash, legend in (
            ("rows_total", "gray", "dashed", "rows in the input"),
            ("rows_done", "#1f77b4", "solid", "rows answered"),
            ("rows_with_error", "#d62728", "solid", "rows with an error"),
        ):
            progress.line(
                source=self.job_source, x="time", y=y, color=color, line_dash=dash, line_width=2, legend_label=legend
            )
        progress.legend.location = "top_left"
        self.summary = Div(
            text="No job has run yet.", name="pipeline-summary", styles={"font-size": "110%", "padding": "4px 12px"}
        )
        f = self.figures
        self.root = column(
            self.summary,
            row(f["progress"], f["load"], sizing_mode="stretch_width"),
            row(f["requests"], f["output-tokens"], sizing_mode="stretch_width"),
            row(f["cache-hits"], f["engine-busy"], sizing_mode="stretch_width"),
            sizing_mode="stretch_width",
            name="pipeline-plots",
        )
        self.update()

    @staticmethod
    def _figure(name: str, title: str, label: str, x_range, share: bool):
        fig = figure(
            title=title,
            name=f"pipeline-{name}",
            x_axis_type="datetime",
            x_range=x_range,
            y_range=Range1d(start=0, end=1.02) if share else DataRange1d(start=0),
            height=260,
            sizing_mode="stretch_width",
            tools="reset, xpan, xwheel_zoom, save",
            toolbar_location="above",
        )
        fig.yaxis.axis_label = label
        fig.yaxis.minor_tick_line_alpha = 0
        fig.xgrid.visible = False
        if share:
            fig.yaxis[0].formatter = NumeralTickFormatter(format="0%")
        return fig

    def _add_shard(self, shard: str) -> ColumnDataSource:
        source = ColumnDataSource({c: [] for c in ("time", *SHARD_COLUMNS)}, name=f"pipeline-shard-{shard}")
        color = Category10_10[list(self.history.shards).index(shard) % len(Category10_10)]
        for name, _, _, col, _ in SHARD_FIGURES:
            self.figures[name].line(source=source, x="time", y=col, color=color, line_width=2, legend_label=shard)
        for y, dash in (("in_flight", "solid"), ("queued", "dashed")):
            self.figures["load"].line(
                source=source, x="time", y=y, color=color, line_width=2, line_dash=dash, legend_label=shard
            )
        for name, *_ in SHARD_FIGURES + [("load",)]:
            self.figures[name].legend.location = "top_left"
            self.figures[name].legend.click_policy = "hide"
        self.sources[shard] = source
        return source

    def update(self) -> None:
        new = self.history.points(after=self.seq)
        self.seq = new["seq"]
        rollover = self.history.max_points
        for shard, cols in new["shards"].items():
            if cols["seq"]:
                source = self.sources.get(shard) or self._add_shard(shard)
                source.stream(_plottable(cols, SHARD_COLUMNS), rollover)
        job = new["job"]
        if job["seq"]:
            self.job_source.stream(_plottable(job, JOB_COLUMNS), rollover)
            self.summary.text = summary(*(job[c][-1] for c in ("job", "rows_done", "rows_total", "rows_with_error")))


def _plottable(cols: dict, names) -> dict:
    """The history's columns as Bokeh wants them: times in ms, None as NaN to leave a gap."""
    out = {"time": [t * 1000 for t in cols["time"]]}
    for name in names:
        values = cols[name]
        out[name] = values if name == "job" else [math.nan if v is None else v for v in values]
    return out


def summary(job: str, done: int, total: int | None, errors: int | None) -> str:
    share = f" ({100 * done / total:.1f} %)" if total else ""
    of = f" of {total:,}" if total is not None else ""
    return (
        f"Job <code>{html.escape(str(job))}</code>: <b>{done:,}</b>{of} rows answered{share}, "
        f"{errors or 0:,} with an error. "
        f"<span style='color:#666'>One point a second, the last 30 minutes; per-shard figures also as a "
        f"<a href='pipeline/table'>table</a> and <a href='pipeline/status.json'>JSON</a>.</span>"
    )


def pipeline_doc(scheduler, extra: dict, doc) -> None:
    """The Bokeh document of one page view, with the signature Dask uses for its pages."""
    from distributed.dashboard.components import add_periodic_callback
    from distributed.dashboard.components.scheduler import BOKEH_THEME, env

    plugin = scheduler.plugins.get(HistoryPlugin.name)
    page = PipelinePlots(plugin.history if plugin is not None else History())
    add_periodic_callback(doc, page, UPDATE_MS)
    doc.add_root(page.root)
    doc.title = "Dask: Pipeline"
    doc.theme = BOKEH_THEME
    doc.template = env.get_template("simple.html")
    doc.template_variables.update(extra)


def register(scheduler) -> BokehTornado | None:
    """Serves ``/pipeline`` from the scheduler's dashboard and links it from Dask's navigation bar; None without a
    dashboard."""
    apps = getattr(scheduler.http_application, "applications", ())
    dask_app = next((a for a in apps if isinstance(a, BokehTornado)), None)  # the Dask dashboard's
    if dask_app is None:
        return None
    from distributed.dashboard.core import BokehApplication
    from distributed.dashboard.scheduler import template_variables

    # ``template_variables`` is memoized per scheduler and every page shares its list, so the entry shows on all.
    variables = template_variables(scheduler)
    pages = variables["pages"]
    if NAV_PAGE not in pages:
        pages.insert(pages.index("info") if "info" in pages else len(pages), NAV_PAGE)
    app = BokehApplication({PATH: pipeline_doc}, scheduler, prefix=dask_app.prefix, template_variables=variables)
    scheduler.http_application.add_application(app)
    app.initialize(IOLoop.current())
    app.start()
    _apps[scheduler] = app
    return app


def unregister(scheduler) -> None:
    app = _apps.pop(scheduler, None)
    if app is not None:
        app.stop()
