"""Run by tests/unit/test_job_scale.py in a process of its own: ``Pipeline.stream`` over a
generator of ROWS rows (fake engine), the client's peak RSS growth over a warmed-up baseline."""

import json
import sys
import time
from pathlib import Path


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def rows(n: int, docs: list[str]):
    for i in range(n):
        yield {"id": f"r{i}", "document": docs[i % len(docs)], "question": f"What is item {i}?"}


def stream(p, n: int, docs: list[str]) -> dict:
    seen = bytearray(n)
    wrong = errors = 0
    t0 = time.perf_counter()
    for r in p.stream(rows(n, docs)):
        seen[r.index] += 1
        wrong += r.id != f"r{r.index}"
        errors += r.error is not None
    return {"rows": n, "seconds": time.perf_counter() - t0, "once": seen.count(1), "wrong_id": wrong, "errors": errors}


if __name__ == "__main__":
    n = int(sys.argv[1])
    from pipeline import Pipeline, load_config

    docs = [f"Document {d}: " + "filler text about nothing in particular. " * 10 for d in range(1000)]
    config = load_config().replace(scheduler={"dashboard_address": None})
    with Pipeline(config, engine="fake") as p:
        stream(p, 100_000, docs)  # (warm-up: imports, pools, the workers' first windows)
        baseline = _status("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
        report = stream(p, n, docs)
        report.update(baseline_rss=baseline, peak_rss=_status("VmHWM"))
    print(json.dumps(report))
