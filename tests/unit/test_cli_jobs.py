"""`python -m pipeline run` end to end with the fake engine: bad rows finish with exit code 0
and one output row each; a file corrupt midway exits 1 and keeps the rows before it."""

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from pipeline import load_config

ROOT = Path(__file__).resolve().parents[2]


def run_cli(tmp_path, *args):
    config = tmp_path / "cluster.yaml"
    config.write_text(
        yaml.safe_dump(
            load_config().replace(scheduler={"dashboard_address": None}, engine={"max_model_len": 1000}).model_dump()
        )
    )
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "run",
            *map(str, args),
            "--engine",
            "fake",
            "--config",
            str(config),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


def test_bad_rows_finish_with_exit_0_and_one_output_row_each(tmp_path):
    documents = pa.array(
        [b"A document about cats.", None, b"", b"\xff\xfe", b"Doc " * 400, b"A document."], pa.binary()
    ).view(pa.string())
    src = tmp_path / "in.parquet"
    pq.write_table(
        pa.table(
            {
                "id": [f"r{i}" for i in range(6)],
                "document": documents,
                "question": ["What?", "What?", "What?", "What?", "What?", None],
            }
        ),
        src,
    )
    proc = run_cli(tmp_path, src, tmp_path / "out.parquet")
    assert proc.returncode == 0, proc.stderr
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [o["id"] for o in out] == [f"r{i}" for i in range(6)]
    assert [o["error"] and o["error"].split(" (")[0] for o in out] == [
        None,
        "input: document is null",
        "input: document is empty",
        "input: document is not valid UTF-8 text",
        "input: prompt too long",
        "input: question is null",
    ]
    assert "rows: 6  errors: 5" in proc.stdout and "input: prompt too long: 1" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_file_corrupt_midway_exits_1_keeping_the_rows_before_it(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for name, start in (("a.parquet", 0), ("b.parquet", 20)):
        pq.write_table(
            pa.table(
                {
                    "id": [f"r{i}" for i in range(start, start + 20)],
                    "document": ["A doc."] * 20,
                    "question": ["What?"] * 20,
                }
            ),
            folder / name,
        )
    data = bytearray((folder / "b.parquet").read_bytes())
    offset = pq.ParquetFile(folder / "b.parquet").metadata.row_group(0).column(1).data_page_offset
    data[offset : offset + 24] = b"\xff" * 24
    (folder / "b.parquet").write_bytes(bytes(data))
    proc = run_cli(tmp_path, folder, tmp_path / "out.parquet", "--part-rows", "5")
    assert proc.returncode == 1, proc.stderr
    assert "b.parquet" in proc.stderr and "run the same command again to resume" in proc.stderr
    assert "Traceback" not in proc.stderr
    # a cluster job (the default for Parquet): a.parquet, the partition before the bad one, is answered
    # and merged; b.parquet's rows wait for the rerun
    kept = pq.read_table(tmp_path / "out.parquet.partial" / "parts").column("id").to_pylist()
    assert kept == [f"r{i}" for i in range(20)]
