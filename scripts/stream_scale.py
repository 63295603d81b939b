#!/usr/bin/env python
"""``Pipeline.stream`` on the shape users have, side by side with the one-process Arrow floor
(scripts/scale_floor.py) and the file job on the same rows (issue 56, item 6), fake engine.

    .venv/bin/python scripts/scale_input.py /tmp/in.parquet --rows 1000000
    .venv/bin/python scripts/stream_scale.py /tmp/in.parquet [--runs 1]

The stream is fed the Parquet file's rows as dicts read a record batch at a time (8,192 rows,
``batch.to_pylist()``: each row's strings fresh, none shared), as a user's generator does; the
feed read alone in a process of its own (a ``Pipeline`` started, no stream) gives the peak that
is the feed's, not the stream's. The file job is ``prepare_job(...).run(p)`` on the same file.
Each runs in a fresh process of its own (a ``Pipeline`` with 2 fake shards), timed from its
first row to its last (the cluster's start left out); the stream's process reports its peak RSS
(``VmHWM``: imports, the cluster's start and the whole stream included) and that every row came
back once.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BATCH_ROWS = 8192  # the feed's record batches (``--batch-rows``)


def _status(field: str) -> int:
    """``field`` of /proc/self/status, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _pipeline():
    from pipeline import Pipeline, load_config

    config = load_config().replace(scheduler={"dashboard_address": None})
    return Pipeline(config, engine="fake")


def feed(src: str, batch_rows: int, pre_buffer: bool):
    """The input's rows as dicts, a record batch at a time, each row's strings fresh. (pyarrow's
    default ``pre_buffer=True`` keeps a growing share of the file's column chunks in memory as it
    reads, 274 MB of Arrow by the end of the 1M-row input, a reader holding nothing of the
    pipeline: ``--pre-buffer`` shows it.)"""
    import pyarrow.parquet as pq

    reader = pq.ParquetFile(src, pre_buffer=pre_buffer, buffer_size=0 if pre_buffer else 1 << 20)
    for batch in reader.iter_batches(batch_size=batch_rows, columns=["id", "document", "question"]):
        yield from batch.to_pylist()


def stream_child(src: str, batch_rows: int, pre_buffer: bool, alone: bool = False) -> dict:
    """The stream, in this (fresh) process: rows/s, every row once, peak RSS. ``alone``: the
    feed read to its end with no stream (a ``Pipeline`` started all the same): its own peak."""
    import pyarrow.parquet as pq

    n = pq.ParquetFile(src).metadata.num_rows
    seen = bytearray(n)
    wrong = errors = 0
    with _pipeline() as p:
        before = _status("VmRSS")
        t0 = time.perf_counter()
        rows = feed(src, batch_rows, pre_buffer)
        if alone:
            seen = bytearray(b"\x01") * sum(1 for _ in rows)
        for r in [] if alone else p.stream(rows):
            seen[r.index] += 1
            wrong += r.id != f"r{r.index}"
            errors += r.error is not None
        seconds = time.perf_counter() - t0
        peak = _status("VmHWM")
    return {
        "rows": n,
        "seconds": seconds,
        "once": seen.count(1),
        "wrong_id": wrong,
        "errors": errors,
        "rss_before_mb": before / 2**20,
        "peak_rss_mb": peak / 2**20,
    }


def file_child(src: str) -> dict:
    """The file job, in this (fresh) process."""
    from pipeline import prepare_job

    with tempfile.TemporaryDirectory(prefix="stream-scale-") as tmp, _pipeline() as p:
        job = prepare_job(src, Path(tmp) / "out.parquet", config=p.config, notify=lambda m: None)
        t0 = time.perf_counter()
        summary = job.run(p, progress=False)
        seconds = time.perf_counter() - t0
    return {"rows": summary.rows, "seconds": seconds, "errors": summary.errors, "peak_rss_mb": _status("VmHWM") / 2**20}


def _child(kind: str, a) -> dict:
    options = ["--batch-rows", str(a.batch_rows)] + (["--pre-buffer"] if a.pre_buffer else [])
    proc = subprocess.run(
        [sys.executable, __file__, a.input, "--child", kind, *options], cwd=ROOT, capture_output=True, text=True
    )
    if proc.returncode:
        raise SystemExit(f"the {kind} run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare(a) -> None:
    """One floor, one file job, the feed alone, one stream, side by side, printed."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from scale_floor import floor

    with tempfile.TemporaryDirectory(prefix="stream-scale-") as tmp:
        f = floor(a.input, str(Path(tmp) / "floor.parquet"), 2)
    j = _child("file", a)
    alone = _child("feed", a)
    s = _child("stream", a)
    fr, jr, sr = f["rows_per_s"], j["rows"] / j["seconds"], s["rows"] / s["seconds"]
    print(f"floor:    {f['rows']} rows in {f['wall_s']:.1f} s, {fr:,.0f} rows/s")
    print(
        f"file job: {j['rows']} rows in {j['seconds']:.1f} s, {jr:,.0f} rows/s, {jr / fr:.3f} x the floor; "
        f"client peak RSS {j['peak_rss_mb']:.0f} MiB"
    )
    print(
        f"stream:   {s['rows']} rows in {s['seconds']:.1f} s, {sr:,.0f} rows/s, {sr / fr:.3f} x the floor; "
        f"client peak RSS {s['peak_rss_mb']:.0f} MiB ({s['rss_before_mb']:.0f} MiB before the stream); "
        f"rows back once: {s['once']}, wrong ids {s['wrong_id']}, errors {s['errors']}"
    )
    print(
        f"the feed alone (no stream, a Pipeline started): {alone['rows'] / alone['seconds']:,.0f} rows/s, "
        f"peak RSS {alone['peak_rss_mb']:.0f} MiB; the stream's own share of the peak: "
        f"{s['peak_rss_mb'] - alone['peak_rss_mb']:.0f} MiB",
        flush=True,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input")
    p.add_argument("--runs", type=int, default=1, help="the three side by side, this many times")
    p.add_argument("--batch-rows", type=int, default=BATCH_ROWS, help="rows of each record batch the feed reads")
    p.add_argument("--pre-buffer", action="store_true", help="the feed's reader with pyarrow's default pre_buffer")
    p.add_argument("--child", choices=("stream", "feed", "file"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        result = (
            file_child(a.input)
            if a.child == "file"
            else stream_child(a.input, a.batch_rows, a.pre_buffer, alone=a.child == "feed")
        )
        print(json.dumps(result))
        return
    for n in range(a.runs):
        if a.runs > 1:
            print(f"run {n + 1} of {a.runs}", flush=True)
        compare(a)


if __name__ == "__main__":
    main()
