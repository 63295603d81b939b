"""Screenshot of the pipeline's dashboard page (/pipeline) in the middle of a job, with
headless Chromium (Debian package `chromium`).

    .venv/bin/python scripts/dashboard_screenshot.py docs/dashboard.png [--engine vllm|null]

Starts the embedded cluster from cluster.yaml (the real engine with enforce_eager unless
--engine null), streams a document-question job, and when half its rows are answered
takes the screenshot from another thread while the job goes on.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import Pipeline, load_config  # noqa: E402
from pipeline.bench.workloads import document_questions  # noqa: E402


def screenshot(url: str, out: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("no chromium on PATH (Debian: apt-get install chromium)")
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1750,640", f"--screenshot={out}", url], check=True, timeout=120,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--engine", choices=["vllm", "null"], default="vllm")
    args = ap.parse_args()
    config = load_config().replace(scheduler={"dashboard_address": "127.0.0.1:0"},
                                   engine={"kind": args.engine, "enforce_eager": True, "null_latency_s": 0.05},
                                   intake={"batch_size": 8, "queue_per_shard": 32,
                                           **({"max_in_flight": 4} if args.engine == "null" else {})})
    rows = document_questions(48, 4, seed=3, order="shuffled")
    half = threading.Event()
    with Pipeline(config) as p:
        url = p.dashboard_link.rsplit("/", 1)[0] + "/pipeline"

        def shoot():
            half.wait()
            time.sleep(2.5)  # the workers' and the client's next figures reach the scheduler
            screenshot(url, args.out)

        shooter = threading.Thread(target=shoot)
        shooter.start()
        done = 0
        for _ in p.stream(rows):
            done += 1
            if done == len(rows) // 3:
                half.set()
        half.set()
        shooter.join()
        print(f"{args.out}: {done} rows; {p.last_report.summary()}")


if __name__ == "__main__":
    main()
