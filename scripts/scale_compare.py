#!/usr/bin/env python
"""Side by side, in one run on the same input: the plumbing floor (scripts/scale_floor.py) and a
fake-engine job through ``python -m pipeline run`` (2 shards by default), with the client's CPU
seconds and peak RSS and the scheduler's CPU, sampled from their processes; and, with
``--kv-tokens``, the cached share the fake engine's prefix-cache model reports, against the
block ideal for the same placement of rows on shards.

    .venv/bin/python scripts/scale_input.py /tmp/in.parquet --rows 1000000
    .venv/bin/python scripts/scale_compare.py /tmp/in.parquet [--kv-tokens 23296] [--runs 5]
    .venv/bin/python scripts/scale_compare.py /tmp/in.jsonl   (an OpenAI batch file: no floor)

Issue 25's targets read off this: rows/s >= 0.3 x the floor's; client CPU <= 5 s for the
whole job; client peak RSS <= 300 MB.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_floor import floor  # noqa: E402  (the script beside this one)

from pipeline.client.tokenizer import load_tokenizer  # noqa: E402
from pipeline.config import load_config  # noqa: E402
from pipeline.model import model_for  # noqa: E402
from tasks import get_task_kind  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def run_pipeline(src: str, dst: str, config: Path) -> dict:
    """The job as a user runs it, its client and scheduler processes sampled every 0.1 s."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", src, dst, "--engine", "fake", "--config", str(config)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    client = psutil.Process(proc.pid)
    peak_rss, cpu, sched_cpu = 0, 0.0, 0.0
    workers_peak, worker_peak = 0, 0  # the rest of the client's process tree (workers): summed, largest
    workers_cpu: dict[int, float] = {}  # pid -> CPU seconds at its last sample
    while proc.poll() is None:
        try:
            with client.oneshot():
                peak_rss = max(peak_rss, client.memory_info().rss)
                t = client.cpu_times()
                cpu = t.user + t.system
            rss = []
            for child in client.children(recursive=True):
                if "dask_scheduler" in " ".join(child.cmdline()):
                    t = child.cpu_times()
                    sched_cpu = t.user + t.system
                else:
                    rss.append(child.memory_info().rss)
                    t = child.cpu_times()
                    workers_cpu[child.pid] = t.user + t.system
            workers_peak, worker_peak = max(workers_peak, sum(rss)), max([worker_peak] + rss)
        except psutil.Error:
            pass
        time.sleep(0.1)
    out = proc.stdout.read()
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"the pipeline failed ({proc.returncode}):\n{out}")
    rows = next(int(line.split()[1]) for line in out.splitlines() if line.startswith("rows:"))
    cached = next((line for line in out.splitlines() if line.startswith("prompt tokens:")), "")
    job_rate = float(next(line for line in out.splitlines() if line.startswith("throughput:")).split()[1])
    return {
        "rows": rows,
        "wall_s": wall,
        "rows_per_s": rows / wall,
        "job_rows_per_s": job_rate,
        "client_cpu_s": cpu,
        "client_peak_rss_mb": peak_rss / 2**20,
        "scheduler_cpu_s": sched_cpu,
        "tokens": cached,
        "workers_peak_rss_mb": workers_peak / 2**20,
        "worker_peak_rss_mb": worker_peak / 2**20,
        "workers_cpu_s": sum(workers_cpu.values()),
    }


def block_ideal_cached(src: str, out: str, config_path: Path, block_size: int = 16) -> int:
    """The prompt tokens a perfect block cache per shard would serve for this job, the null
    engine counting characters as tokens (pipeline/bench/prefill_ideal.py's block ideal, worked
    out from the prompts' structure so that a million rows need no token lists): per shard, the
    full blocks of the head that every prompt shares once; per shard that serves a document,
    the further full blocks its prompts share (its prefix, and the start of the suffix its
    questions have in common) once; every row computes the rest of its prompt."""
    config = load_config(config_path)
    task = get_task_kind(config, load_tokenizer(model_for(config, "fake")))
    shared: dict[int, list] = {}  # document (its hash) -> [its prefix, a suffix, shared length]
    rows = []
    inputs = pq.ParquetFile(src).iter_batches(batch_size=65536, columns=["document", "question"])
    outputs = pq.ParquetFile(out).iter_batches(batch_size=65536, columns=["shard", "prompt_tokens"])
    for a, b in zip(inputs, outputs):
        for doc, question, shard, tokens in zip(
            a.column("document").to_pylist(),
            a.column("question").to_pylist(),
            b.column("shard").to_pylist(),
            b.column("prompt_tokens").to_pylist(),
        ):
            parts = task.split({"document": doc, "question": question})
            key = hash(doc)
            seen = shared.get(key)
            if seen is None:
                shared[key] = [parts.prefix, parts.suffix, len(parts.prefix) + len(parts.suffix)]
            else:
                seen[2] = min(seen[2], len(parts.prefix) + len(os.path.commonprefix([seen[1], parts.suffix])))
            rows.append((shard, key, tokens))
    heads = [v[0] for v in list(shared.values())[:64]]
    head = len(os.path.commonprefix(heads)) // block_size * block_size if len(heads) > 1 else 0
    served: set[tuple[str, int]] = set()  # (shard, document)
    shards: set[str] = set()
    total = computed = 0
    for shard, key, tokens in rows:
        full = shared[key][2] // block_size * block_size
        total += tokens
        computed += tokens - full  # past the document's shared full blocks
        if (shard, key) not in served:
            served.add((shard, key))
            computed += full - head  # the document's shared blocks, once
            if shard not in shards:
                shards.add(shard)
                computed += head  # the head every prompt shares, once per shard
    return total - computed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input")
    p.add_argument("--kv-tokens", type=int, default=0, help="engine.null_kv_cache_tokens (0: no cache model)")
    p.add_argument("--config", default=str(ROOT / "cluster.yaml"))
    p.add_argument(
        "--runs",
        type=int,
        default=1,
        help="floor and pipeline this many times, one after the other; the ratio of the medians "
        "(this box's rows/s vary by 2x from run to run)",
    )
    a = p.parse_args()
    ratios, floors, pipelines = [], [], []
    for n in range(a.runs):
        if a.runs > 1:
            print(f"run {n + 1} of {a.runs}", flush=True)
        f, r = compare(a)
        if f is not None:
            ratios.append(r["rows_per_s"] / f["rows_per_s"])
            floors.append(f["rows_per_s"])
        pipelines.append(r["rows_per_s"])
    if a.runs > 1:
        print(
            f"medians over {a.runs} runs: pipeline {statistics.median(pipelines):,.0f} rows/s"
            + (
                f", floor {statistics.median(floors):,.0f} rows/s; pipeline / floor, ratio of medians "
                f"{statistics.median(pipelines) / statistics.median(floors):.3f} (per run: "
                f"{', '.join(f'{x:.3f}' for x in ratios)})"
                if floors
                else ""
            )
        )


def compare(a) -> tuple[dict | None, dict]:
    """One floor run and one pipeline run, side by side, printed."""
    with tempfile.TemporaryDirectory(prefix="scale-compare-") as tmp:
        cfg = yaml.safe_load(Path(a.config).read_text())
        if a.kv_tokens:
            cfg.setdefault("engine", {})["null_kv_cache_tokens"] = a.kv_tokens
        cfg.setdefault("scheduler", {})["dashboard_address"] = None
        config = Path(tmp) / "cluster.yaml"
        config.write_text(yaml.safe_dump(cfg))
        shards = len(cfg["shards"]) if isinstance(cfg.get("shards"), list) else None
        jsonl = a.input.endswith(".jsonl")  # (an OpenAI batch file: the floor reads Parquet, so none)
        f = None if jsonl else floor(a.input, str(Path(tmp) / "floor.parquet"), shards or 2)
        r = run_pipeline(a.input, str(Path(tmp) / ("out.jsonl" if jsonl else "out.parquet")), config)
        ideal = (
            block_ideal_cached(a.input, str(Path(tmp) / "out.parquet"), config) if a.kv_tokens and not jsonl else None
        )
    if f is not None:
        print(
            f"floor:    {f['rows']} rows in {f['wall_s']:.1f} s, {f['rows_per_s']:,.0f} rows/s, "
            f"{f['cpu_s']:.1f} s CPU, peak RSS {f['peak_rss_mb']:.0f} MB"
        )
    print(
        f"pipeline: {r['rows']} rows in {r['wall_s']:.1f} s (command to exit), {r['rows_per_s']:,.0f} rows/s "
        f"({r['job_rows_per_s']:,.0f} rows/s from the job's start, as its summary says); "
        f"client {r['client_cpu_s']:.1f} s CPU, peak RSS {r['client_peak_rss_mb']:.0f} MB; "
        f"scheduler {r['scheduler_cpu_s']:.1f} s CPU; workers {r['workers_cpu_s']:.1f} s CPU (sampled); "
        f"workers' peak RSS {r['workers_peak_rss_mb']:,.0f} MB "
        f"together, the largest {r['worker_peak_rss_mb']:,.0f} MB"
    )
    if f is not None:
        print(f"pipeline / floor: {r['rows_per_s'] / f['rows_per_s']:.3f}")
    if r["tokens"]:
        print(r["tokens"])
    if ideal is not None:
        cached = int(r["tokens"].split("cached:")[1].split()[0])
        print(f"block ideal for this placement: {ideal} tokens cached; cache model / ideal: {cached / ideal:.3f}")
    return f, r


if __name__ == "__main__":
    main()
