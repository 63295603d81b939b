"""Fair share on a resident cluster, measured from outside: a big job alone, a small job alone,
then the big job with the small one started ``--delay`` seconds after it (and, with ``--three``,
a second small job too). Each job is ``python -m pipeline run`` in its own process, as a user
runs it; its figures are the summary it prints (time, first answer) and its process's wall time.

    .venv/bin/python scripts/fair_share.py [--config cluster.yaml] [--big-docs 100] [--small-docs 4]
        [--engine fake --latency 0.25]

Every job has documents of its own (another seed), so no run is answered from an earlier run's
prefix cache. The resident cluster is started here (``up``) and stopped at the end (``down``)
unless one already runs. Prints one line per run and the ratios the fairness target is about:
small together / small alone (first answer and whole time), big together / big alone.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.bench.workloads import document_questions  # noqa: E402

PY = sys.executable
SUMMARY = re.compile(r"rows: (\d+).*?errors: (\d+)\s+time: ([\d.]+) s(?: \(first answer after ([\d.]+) s\))?")


def write(folder: Path, name: str, docs: int, questions: int, seed: int, filler: int) -> Path:
    rows = document_questions(
        docs, questions, seed=seed, order="shuffled", filler_sentences=filler, id_prefix=f"{name}-"
    )
    path = folder / f"{name}.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def start(config: str | None, source: Path, out: Path, engine: str | None) -> tuple[subprocess.Popen, float]:
    cmd = [PY, "-m", "pipeline", "run", str(source), str(out), "--quiet"]
    if config:
        cmd += ["--config", config]
    if engine:
        cmd += ["--engine", engine]
    return subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ), time.perf_counter()


def finish(proc: subprocess.Popen, t0: float) -> dict:
    text, _ = proc.communicate()
    wall = time.perf_counter() - t0
    m = SUMMARY.search(text)
    if proc.returncode != 0 or m is None:
        raise SystemExit(f"job failed (exit {proc.returncode}):\n{text}")
    return {
        "rows": int(m[1]),
        "errors": int(m[2]),
        "time": float(m[3]),
        "first": float(m[4]) if m[4] else float("nan"),
        "wall": wall,
    }


def show(label: str, r: dict) -> None:
    print(
        f"{label:<28} rows {r['rows']:>4}  errors {r['errors']}  first answer {r['first']:6.2f} s  "
        f"job {r['time']:6.1f} s  process {r['wall']:6.1f} s",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=None)
    ap.add_argument("--engine", default=None, help="e.g. fake (with the config's null_latency_s)")
    ap.add_argument("--big-docs", type=int, default=100)
    ap.add_argument("--small-docs", type=int, default=4)
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--filler", type=int, default=40, help="filler sentences a document (40: ~750 tokens)")
    ap.add_argument("--delay", type=float, default=3.0)
    ap.add_argument("--three", action="store_true", help="also: big + small + a second small, at once")
    ap.add_argument("--keep-cluster", action="store_true", help="leave the resident cluster running")
    args = ap.parse_args()
    base = [PY, "-m", "pipeline"]
    conf = ["--config", args.config] if args.config else []
    status = subprocess.run(base + ["status"] + conf, cwd=ROOT, capture_output=True, text=True)
    running = status.returncode == 0 and "no local cluster" not in (status.stdout + status.stderr).lower()
    if not running:
        print("starting the resident cluster ...", flush=True)
        subprocess.run(base + ["up"] + conf, cwd=ROOT, check=True)
    seeds = iter(range(1000, 2000))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)

            def job(kind: str) -> Path:
                docs = args.big_docs if kind == "big" else args.small_docs
                return write(folder, f"{kind}{next(seeds)}", docs, args.questions, next(seeds), args.filler)

            def alone(kind: str) -> dict:
                src = job(kind)
                r = finish(*start(args.config, src, src.with_suffix(".out.parquet"), args.engine))
                show(f"{kind} alone", r)
                return r

            small_alone = alone("small")
            big_alone = alone("big")
            big_src, small_src = job("big"), job("small")
            big = start(args.config, big_src, big_src.with_suffix(".out.parquet"), args.engine)
            time.sleep(args.delay)
            small = start(args.config, small_src, small_src.with_suffix(".out.parquet"), args.engine)
            small_with, big_with = finish(*small), finish(*big)
            show(f"small {args.delay:g} s after big", small_with)
            show("big, small beside it", big_with)
            print(
                f"ratios: small first answer together/alone {small_with['first'] / small_alone['first']:.2f}, "
                f"small job time {small_with['time'] / small_alone['time']:.2f}; "
                f"big job time together/alone {big_with['time'] / big_alone['time']:.3f}",
                flush=True,
            )
            if args.three:
                srcs = [job("big"), job("small"), job("small")]
                procs = [start(args.config, srcs[0], srcs[0].with_suffix(".out.parquet"), args.engine)]
                time.sleep(args.delay)
                for s in srcs[1:]:
                    procs.append(start(args.config, s, s.with_suffix(".out.parquet"), args.engine))
                results = [finish(*p) for p in reversed(procs)][::-1]
                for label, r in zip(("big (three jobs)", "small 1 (three jobs)", "small 2 (three jobs)"), results):
                    show(label, r)
                print(
                    f"ratios (three jobs): smalls' first answer / alone "
                    f"{results[1]['first'] / small_alone['first']:.2f}, "
                    f"{results[2]['first'] / small_alone['first']:.2f}; time "
                    f"{results[1]['time'] / small_alone['time']:.2f}, "
                    f"{results[2]['time'] / small_alone['time']:.2f}; "
                    f"big {results[0]['time'] / big_alone['time']:.3f}",
                    flush=True,
                )
    finally:
        if not running and not args.keep_cluster:
            subprocess.run(base + ["down"] + conf, cwd=ROOT)


if __name__ == "__main__":
    main()
