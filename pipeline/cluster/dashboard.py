"""The pipeline's page on the Dask dashboard: ``/pipeline`` (HTML) and ``/pipeline/status.json``.

Served by the scheduler's own HTTP server (the one behind the Dask dashboard), added by
the scheduler preload (pipeline/worker/preload.py). It reads what the scheduler already holds:
each worker's figures, which the engine plugin sends every second while it works as Dask events
(topic ``pipeline-shard``), and the client's view (router, current job), which
``Pipeline.stream`` keeps in the scheduler's metadata. Requests/s and output tokens/s are
the rates over a shard's snapshots of the last 10 seconds; so is the engine busy share
(the part of that time in which the shard's engine had at least one request).
"""
from __future__ import annotations

import html
import json
import time

from distributed.http.utils import RequestHandler

from pipeline.names import ENGINE_DIED_TOPIC, PUBLISH_INTERVAL_S, SNAPSHOT_TOPIC, VIEW_METADATA_KEY

PATH = "/pipeline"
RATE_WINDOW_S = 10.0       # requests/s and output tokens/s: over this many seconds


def status(scheduler) -> dict:
    """Per-shard figures (workers' latest snapshots, rates over the last RATE_WINDOW_S) merged
    with the client's view."""
    recent: dict[str, list[dict]] = {}
    for _, msg in scheduler.get_events(SNAPSHOT_TOPIC):
        window = recent.setdefault(msg["shard"], [])
        window.append(msg)
        while msg["time"] - window[0]["time"] > RATE_WINDOW_S:
            window.pop(0)
    view = scheduler.get_metadata([VIEW_METADATA_KEY], default=None) or {}
    routed = view.get("shards", {})
    shards = {}
    for name in sorted(set(recent) | set(routed)):
        snaps = recent.get(name, [])
        s = dict(snaps[-1]) if snaps else {}
        if snaps and time.time() - snaps[-1]["time"] > 3 * PUBLISH_INTERVAL_S:  # idle: it stopped sending
            s["requests_per_s"] = s["output_tokens_per_s"] = s["engine_busy_share"] = 0.0
        elif len(snaps) >= 2 and snaps[-1]["time"] > snaps[0]["time"]:
            dt = snaps[-1]["time"] - snaps[0]["time"]
            s["requests_per_s"] = (snaps[-1]["requests"] - snaps[0]["requests"]) / dt
            s["output_tokens_per_s"] = (snaps[-1]["output_tokens"] - snaps[0]["output_tokens"]) / dt
            if "engine_busy_s" in snaps[0]:
                s["engine_busy_share"] = (snaps[-1]["engine_busy_s"] - snaps[0]["engine_busy_s"]) / dt
        s.update(routed.get(name, {}))
        shards[name] = s
    died = [msg for _, msg in scheduler.get_events(ENGINE_DIED_TOPIC)][-10:]
    return {"shards": shards, "job": view.get("job"), "pending_rows": view.get("pending_rows"),
            "engine_deaths": died}


COLUMNS = [  # (key, heading, format)
    ("worker", "worker", "{}"), ("routing", "routing", "{}"),
    ("queued", "requests queued", "{:d}"), ("in_flight", "in flight", "{:d}"),
    ("prefill_outstanding", "prefill tokens outstanding", "{:,d}"),
    ("cache_hit_share", "prefix-cache hit share", "{:.3f}"),
    ("requests_per_s", "requests/s", "{:.1f}"), ("output_tokens_per_s", "output tokens/s", "{:.1f}"),
    ("engine_busy_share", "engine busy share", "{:.2f}"),
    ("requests", "requests done", "{:,d}"),
    ("gc_collections", "GC collections", "{:,d}"), ("gc_pause_s", "GC pause total (s)", "{:.3f}"),
    ("gc_max_pause_s", "GC max pause (ms)", "ms"),
    ("documents_bound", "documents owned (router)", "{:,d}"), ("prefix_blocks_held", "prefix blocks held (router)", "{:,d}"),
    ("rows_bound", "rows bound", "{:,d}"), ("engine_builds", "engine builds", "{:d}"),
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
    rows = "".join(f"<tr><th>{html.escape(name)}</th>" + "".join(f"<td>{_cell(s.get(k), f)}</td>" for k, _, f in COLUMNS)
                   + "</tr>" for name, s in st["shards"].items())
    job = st.get("job") or {}
    job_html = "<p>No job has run yet.</p>"
    if job:
        items = ["rows answered", "batches", "workers_lost", "batches_interrupted", "rows_rerouted", "rows_failed",
                 "duplicates_dropped"]
        job_html = (f"<p>Job <code>{html.escape(job['job'])}</code> (a Dask span of that name groups its tasks"
                    f" on the standard pages); rows waiting unbound: {st.get('pending_rows')}</p><ul>"
                    + "".join(f"<li>{html.escape(k.replace('_', ' '))}: {job.get(k.split()[0], job.get(k))}</li>"
                              for k in items)
                    + "".join(f"<li>{html.escape(e['kind'])}: {html.escape(e['shard'])} ({html.escape(str(e['worker']))})</li>"
                              for e in job.get("events", []))
                    + "</ul>")
    deaths = "".join(f"<li>{html.escape(d['shard'])}: {html.escape(d['error'])}</li>" for d in st["engine_deaths"])
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="2"><title>Pipeline shards</title>
<style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:4px 8px;text-align:right}}thead th{{background:#eef;font-size:90%}}</style>
</head><body><h1>Pipeline shards</h1>
<p><a href="/status">Dask status</a> · <a href="{PATH}/status.json">JSON</a> · refreshes every 2 s</p>
<table><thead><tr><th>shard</th>{head}</tr></thead><tbody>{rows}</tbody></table>
<h2>Current job</h2>{job_html}
{'<h2>Engine deaths</h2><ul>' + deaths + '</ul>' if deaths else ''}
</body></html>"""


class PipelinePage(RequestHandler):
    def get(self):
        self.write(render(status(self.server)))
        self.set_header("Content-Type", "text/html")


class PipelineStatus(RequestHandler):
    def get(self):
        self.write(json.dumps(status(self.server)))
        self.set_header("Content-Type", "application/json")


def install(scheduler) -> None:
    """Add the page to this scheduler's HTTP server (the Dask dashboard's)."""
    scheduler.http_application.add_handlers(r".*", [
        (PATH, PipelinePage, {"dask_server": scheduler}),
        (PATH + "/status.json", PipelineStatus, {"dask_server": scheduler}),
    ])
