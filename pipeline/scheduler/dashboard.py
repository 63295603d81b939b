"""The pipeline's pages on the scheduler's HTTP server, installed by the scheduler preload: live plots at
``/pipeline`` when the Dask dashboard is on, and the shards' figures as an HTML table at ``/pipeline/table`` and as
JSON at ``/pipeline/status.json``. They read what the scheduler holds: each worker's figures, sent as Dask events
while it works, and the current job's view in the scheduler's metadata."""

from __future__ import annotations

import html
import json
import time
from collections import deque

from distributed.http.utils import RequestHandler

from pipeline.names import ENGINE_DIED_TOPIC, SHARD_RESOURCE_PREFIX, SNAPSHOT_TOPIC, VIEW_METADATA_KEY
from pipeline.scheduler.history import RATE_WINDOW_S, STALE_AFTER_S, HistoryPlugin, slide, window_rates

PATH = "/pipeline"  # the plots (dashboard_plots.PATH)
TABLE_PATH = PATH + "/table"
JSON_PATH = PATH + "/status.json"


def _serving(scheduler) -> dict[str, str]:
    """Shard -> the address of the worker serving it, found by its ``shard-<name>`` resource."""
    out = {}
    for ws in getattr(scheduler, "workers", {}).values():
        for resource in ws.resources:
            if resource.startswith(SHARD_RESOURCE_PREFIX):
                out[resource[len(SHARD_RESOURCE_PREFIX) :]] = ws.address
    return out


def status(scheduler) -> dict:
    """Each shard's latest snapshot with rates over the last ``RATE_WINDOW_S``, and the current job's figures."""
    recent: dict[str, deque[dict]] = {}
    received: dict[str, float] = {}  # shard -> when its latest snapshot was logged
    for at, msg in scheduler.get_events(SNAPSHOT_TOPIC):
        received[msg["shard"]] = at
        slide(recent.setdefault(msg["shard"], deque()), msg, RATE_WINDOW_S)
    view = scheduler.get_metadata([VIEW_METADATA_KEY], default=None) or {}
    serving = _serving(scheduler)  # lists shards that have sent nothing yet too
    shards = {}
    for name in sorted(set(recent) | set(serving)):
        snaps = recent.get(name, ())
        s = dict(snaps[-1]) if snaps else {"worker": serving[name]}
        if snaps:
            idle = time.time() - received[name] > STALE_AFTER_S  # it stopped sending
            rates = window_rates(() if idle else snaps)
            del rates["cache_hit_share"]  # the table's is the snapshot's: since the engine started
            s.update(rates)
        shards[name] = s
    died = [msg for _, msg in scheduler.get_events(ENGINE_DIED_TOPIC)][-10:]
    return {"shards": shards, "job": view.get("job"), "engine_deaths": died}


COLUMNS = [  # (key, heading, format)
    ("worker", "worker", "{}"),
    ("queued", "requests queued", "{:d}"),
    ("in_flight", "in flight", "{:d}"),
    ("prefill_outstanding", "prefill tokens outstanding", "{:,d}"),
    ("cache_hit_share", "prefix-cache hit share", "{:.3f}"),
    ("requests_per_s", "requests/s", "{:.1f}"),
    ("output_tokens_per_s", "output tokens/s", "{:.1f}"),
    ("engine_busy_share", "engine busy share", "{:.2f}"),
    ("requests", "requests done", "{:,d}"),
    ("gc_collections", "GC collections", "{:,d}"),
    ("gc_pause_s", "GC pause total (s)", "{:.3f}"),
    ("gc_max_pause_s", "GC max pause (ms)", "ms"),
    ("engine_builds", "engine builds", "{:d}"),
]


def _cell(value, fmt: str) -> str:
    if value is None:
        return "–"
    try:
        text = f"{value * 1000:.2f}" if fmt == "ms" else fmt.format(value)
    except (TypeError, ValueError):
        text = str(value)
    return html.escape(text)


def render(st: dict) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in COLUMNS)
    rows = "".join(
        f"<tr><th>{html.escape(name)}</th>" + "".join(f"<td>{_cell(s.get(k), f)}</td>" for k, _, f in COLUMNS) + "</tr>"
        for name, s in st["shards"].items()
    )
    job = st.get("job") or {}
    job_html = "<p>No job has run yet.</p>"
    if job:
        items = ["rows answered", "rows_total", "rows_with_error", "workers_lost", "buckets_moved"]
        title = f" ({html.escape(job['title'])})" if job.get("title") else ""
        job_html = (
            f"<p>Job <code>{html.escape(job['job'])}</code>{title} (a Dask span of that name groups its tasks"
            f" on the standard pages)</p><ul>"
            + "".join(
                f"<li>{html.escape(k.replace('_', ' '))}: {job.get(k.split()[0], job.get(k))}</li>" for k in items
            )
            + "".join(
                f"<li>{html.escape(e['kind'])}: {html.escape(e['shard'])} ({html.escape(str(e['worker']))})</li>"
                for e in job.get("events", [])
            )
            + "</ul>"
        )
    deaths = "".join(f"<li>{html.escape(d['shard'])}: {html.escape(d['error'])}</li>" for d in st["engine_deaths"])
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="2"><title>Pipeline shards</title>
<style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:4px 8px;text-align:right}}thead th{{background:#eef;font-size:90%}}</style>
</head><body><h1>Pipeline shards</h1>
<p><a href="../status">Dask status</a> · <a href="../pipeline">plots</a> · <a href="status.json">JSON</a> \
· refreshes every 2 s</p>
<table><thead><tr><th>shard</th>{head}</tr></thead><tbody>{rows}</tbody></table>
<h2>Current job</h2>{job_html}
{"<h2>Engine deaths</h2><ul>" + deaths + "</ul>" if deaths else ""}
</body></html>"""


class PipelineTable(RequestHandler):
    def get(self):
        self.write(render(status(self.server)))
        self.set_header("Content-Type", "text/html")


class PipelineStatus(RequestHandler):
    def get(self):
        self.write(json.dumps(status(self.server)))
        self.set_header("Content-Type", "application/json")


def install(scheduler) -> None:
    """Adds the table and JSON pages, and with the Dask dashboard on, the plots page and the history it draws
    from."""
    pages = [(TABLE_PATH, PipelineTable), (JSON_PATH, PipelineStatus)]
    scheduler.http_application.add_handlers(r".*", [(path, page, {"dask_server": scheduler}) for path, page in pages])
    if has_dashboard(scheduler):
        from pipeline.scheduler import dashboard_plots  # Bokeh: imported only where it is served

        scheduler.add_plugin(HistoryPlugin(), idempotent=True)
        dashboard_plots.register(scheduler)


def uninstall(scheduler) -> None:
    if has_dashboard(scheduler):
        from pipeline.scheduler import dashboard_plots  # Bokeh: imported only where it is served

        dashboard_plots.unregister(scheduler)


def has_dashboard(scheduler) -> bool:
    """Whether Dask's dashboard is on; ``--no-dashboard`` serves no Bokeh application and never imports Bokeh."""
    return any(
        type(app).__module__.startswith(("bokeh.", "distributed.dashboard."))
        for app in getattr(scheduler.http_application, "applications", ())
    )
