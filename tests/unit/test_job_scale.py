"""A million rows from a Python generator go through ``Pipeline.stream`` in bounded client
memory, each answered once with its id (fake engine; the cluster path of a file job)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROWS = 1_000_000


def test_million_rows_stream_through_in_bounded_memory():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests/unit/helpers/bounded_stream.py"), str(ROWS)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["once"] == ROWS and report["wrong_id"] == 0 and report["errors"] == 0, report
    added = report["peak_rss"] - report["baseline_rss"]
    print(f"{ROWS} rows in {report['seconds']:.1f} s; client's peak RSS growth: {added / 2**20:.0f} MiB")
    # The rows as Python dicts take ~600 MiB, as Arrow ~450; holding them (or their results)
    # would add that. The client holds a window or two of 50,000 rows: 55 MiB in the run seen.
    assert added < 200 * 2**20, added
