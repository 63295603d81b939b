#!/usr/bin/env python
"""A fake-engine file job's own time and the workers' CPU, measured in the workers: an embedded
2-shard cluster is started first, each worker's process CPU seconds (psutil) are read just before
and just after ``job.run``. Leaves out what ``scripts/scale_compare.py`` includes (imports, the
cluster's start and close, the floor), so two versions of the code compare by the job alone:

    .venv/bin/python scripts/job_cpu.py /tmp/in.parquet
    PYTHONPATH=/path/to/other/checkout .venv/bin/python scripts/job_cpu.py /tmp/in.parquet
"""

from __future__ import annotations

import sys
import tempfile
import time


def cpu_seconds() -> float:
    import psutil

    t = psutil.Process().cpu_times()
    return t.user + t.system


def main(src: str) -> None:
    from pipeline.client.pipeline import Pipeline
    from pipeline.config import load_config
    from pipeline.jobs.job import prepare_job

    config = load_config().replace(scheduler={"dashboard_address": None}, engine={"kind": "fake"})
    with tempfile.TemporaryDirectory() as tmp:
        job = prepare_job(src, f"{tmp}/out.parquet", config=config)
        with Pipeline(config) as pipeline:
            before = sum(pipeline.client.run(cpu_seconds).values())
            t0 = time.perf_counter()
            summary = job.run(pipeline, progress=False)
            wall = time.perf_counter() - t0
            after = sum(pipeline.client.run(cpu_seconds).values())
    print(f"job {wall:.2f} s wall, workers {after - before:.2f} s CPU, rows {summary.rows}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
