"""The Python API is as quiet as the command line: a ``Pipeline`` on an embedded cluster tells
the user which cluster and each engine's start, not Dask's INFO lines, unless verbose."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import logging
from pipeline import Pipeline, load_config

if __name__ == "__main__":
    config = load_config().replace(scheduler={"dashboard_address": None})
    with Pipeline(config, engine="fake") as p:
        results = p.run([{"id": "r1", "document": "d", "question": "q"}])
    print("answered", [r.id for r in results])
    print("level after close", logging.getLogger("distributed").getEffectiveLevel())
"""


def test_a_pipeline_on_an_embedded_cluster_shows_no_dask_info_lines(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "answered ['r1']" in proc.stdout
    assert " - INFO - " not in proc.stderr, proc.stderr  # e.g. "distributed.nanny - INFO - Start Nanny at"
    assert "shard cpu0: engine ready" in proc.stderr  # what the user is told
    assert "level after close 20" in proc.stdout  # Dask's own level (INFO) is back after close
