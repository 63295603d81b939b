"""Up-front failures of `python -m pipeline run`: a clear message, exit code 2, no engine started."""
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "pipeline", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_missing_column_names_what_exists(tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"document": ["d"], "prompt": ["q"]}), src)
    proc = run_cli("run", src, tmp_path / "out.parquet")
    assert proc.returncode == 2
    assert "lacks required column(s) question" in proc.stderr and "document, prompt" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out.parquet").exists()


def test_missing_and_corrupt_input(tmp_path):
    proc = run_cli("run", tmp_path / "nope.parquet", tmp_path / "out.parquet")
    assert proc.returncode == 2 and "input not found" in proc.stderr
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    proc = run_cli("run", bad, tmp_path / "out.parquet")
    assert proc.returncode == 2 and "cannot read" in proc.stderr and "Traceback" not in proc.stderr


def test_output_folder_must_exist(tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"document": ["d"], "question": ["q"]}), src)
    proc = run_cli("run", src, tmp_path / "no" / "such" / "out.parquet")
    assert proc.returncode == 2 and "output folder does not exist" in proc.stderr
