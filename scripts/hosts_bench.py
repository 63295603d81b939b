"""Several hosts, measured: the same fake-engine job on three network-namespace hosts and on one
host over loopback, and with compression on and off over shaped links. Needs root (it makes
network namespaces, tests/unit/helpers/netns.py); prints one line per run and the ratios.

    .venv/bin/python scripts/hosts_bench.py [--rows 200000] [--rate 100mbit]

Input: distinct retrieval-sized documents (50 filler sentences: about 750 tokens each, 4 questions
each, shuffled), as fresh strings in a Parquet file on the shared disk. Each run starts its own cluster
(`python -m pipeline scheduler` and two `python -m pipeline worker`), runs `python -m pipeline run`
on the scheduler's host, and counts the bytes over the worker hosts' links.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "unit"))
sys.path.insert(0, str(ROOT))

from helpers.netns import make_rig  # noqa: E402
from helpers.rig_cluster import RigCluster, read_output, rig_config, write_rows  # noqa: E402
from pipeline.bench.workloads import document_questions  # noqa: E402


def one_run(name: str, hosts: int, folder: Path, data: Path, rows: int, compression: str, rate: str | None) -> dict:
    rig = make_rig(hosts)
    config = rig_config(["cpu0", "cpu1"])
    config["network"] = {"compression": compression}
    config["engine"]["max_model_len"] = 16384  # (the fake engine counts a prompt's characters as its tokens)
    config["advanced"]["jobs"] = {}  # the defaults: 65,536-row partitions, 50,000-row buckets
    config["advanced"]["intake"] = {}
    run_dir = folder / name
    run_dir.mkdir()
    c = RigCluster(rig, run_dir, config, loopback=hosts == 1)
    try:
        if rate:
            for h in rig.hosts:
                h.shape(rate)
        c.start()
        before = [sum(h.link_bytes()) for h in rig.hosts]
        t0 = time.perf_counter()
        done = c.run([data, run_dir / "out.parquet"], timeout_s=1800)
        seconds = time.perf_counter() - t0
        if done.returncode != 0:
            raise SystemExit(f"{name}: the job failed:\n{done.stderr[-2000:]}")
        out = read_output(run_dir / "out.parquet")
        errors = [r["error"] for r in out if r["error"] is not None]
        assert len(out) == rows and not errors, (len(out), errors[:3])
        moved = [sum(h.link_bytes()) - b for h, b in zip(rig.hosts, before)]
        figures = {
            "name": name,
            "seconds": seconds,
            "rows_per_s": rows / seconds,
            "wire_bytes": sum(moved[1:]),
            "head_bytes": moved[0],
        }
        print(
            f"{name:<28} {seconds:7.1f} s  {rows / seconds:9,.0f} rows/s  worker links {sum(moved[1:]) / 1e6:7.1f} MB"
            f"  scheduler+client link {moved[0] / 1e6:6.2f} MB",
            flush=True,
        )
        return figures
    finally:
        c.stop()
        rig.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--rate", default="100mbit", help="the shaped links' rate for the compression runs")
    ap.add_argument(
        "--filler-sentences",
        type=int,
        default=50,
        help="document size: about 13 tokens each (default 50: retrieval-sized, ~750 tokens)",
    )
    ap.add_argument("--skip-shaped", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hosts-bench-") as tmp:
        folder = Path(tmp)
        data = write_rows(
            folder / "in.parquet",
            document_questions(args.rows // 4, 4, seed=54, order="shuffled", filler_sentences=args.filler_sentences),
        )
        print(f"{args.rows:,} rows, {args.rows // 4:,} distinct documents; fake engine, 2 shards", flush=True)
        loop = one_run("one host, loopback", 1, folder, data, args.rows, "auto", None)
        three = one_run("three hosts", 3, folder, data, args.rows, "auto", None)
        print(f"three hosts / one host (rows/s): {three['rows_per_s'] / loop['rows_per_s']:.3f}")
        if args.skip_shaped:
            return
        raw = one_run(f"three hosts {args.rate}, none", 3, folder, data, args.rows, "none", args.rate)
        packed = one_run(f"three hosts {args.rate}, auto", 3, folder, data, args.rows, "auto", args.rate)
        print(
            f"{args.rate}: bytes on the worker links auto/none {packed['wire_bytes'] / raw['wire_bytes']:.3f} "
            f"({raw['wire_bytes'] / packed['wire_bytes']:.1f}x less); job time auto/none "
            f"{packed['seconds'] / raw['seconds']:.3f}"
        )


if __name__ == "__main__":
    main()
