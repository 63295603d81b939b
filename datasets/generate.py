#!/usr/bin/env python
"""Write the deterministic sample inputs in this folder (same seed -> same bytes).

    python datasets/generate.py            # rewrites datasets/sample.parquet

The generators live in pipeline/bench/workloads.py; this folder is deliberately not a
Python package (a top-level ``datasets`` package would shadow the Hugging Face
library of that name).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.bench.workloads import document_questions

HERE = Path(__file__).resolve().parent


def write(rows: list[dict], path: Path) -> None:
    pq.write_table(pa.Table.from_pylist(rows), path, compression="zstd")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=16)
    p.add_argument("--questions-per-doc", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--order", default="interleaved", choices=["grouped", "interleaved", "shuffled"])
    p.add_argument("--out", type=Path, default=HERE / "sample.parquet")
    a = p.parse_args()
    rows = document_questions(a.docs, a.questions_per_doc, seed=a.seed, order=a.order)
    write(rows, a.out)
    print(f"wrote {len(rows)} rows to {a.out}")


if __name__ == "__main__":
    main()
