"""Screenshot of the pipeline's plots page (/pipeline) during a job, with headless Chromium
driven by selenium (scripts/chromium.py: Debian's `chromium` and `chromium-driver`).

    .venv/bin/python scripts/dashboard_screenshot.py docs/dashboard.png [--engine vllm|fake]

Starts the embedded cluster from cluster.yaml (the real engine with enforce_eager unless
--engine fake), streams a document-question job, opens the page as the job starts, and takes
the screenshot from another thread once two thirds of its rows are answered (the plots then
hold the job so far) while the job goes on.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import chromium  # noqa: E402  (scripts/chromium.py)

from pipeline import Pipeline, load_config  # noqa: E402
from pipeline.bench.workloads import document_questions  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--engine", choices=["vllm", "fake"], default="vllm")
    args = ap.parse_args()
    try:
        browser = chromium.start(width=1600, height=1150)
    except chromium.NoBrowser as exc:
        raise SystemExit(str(exc))
    config = load_config().replace(
        scheduler={"dashboard_address": "127.0.0.1:0"},
        engine={"kind": args.engine, "enforce_eager": True, "null_latency_s": 0.05},
        intake={"max_in_flight": 4} if args.engine == "fake" else {},
    )
    rows = document_questions(48, 4, seed=3, order="shuffled")
    started, enough = threading.Event(), threading.Event()
    try:
        with Pipeline(config) as p:
            url = p.dashboard_link.rsplit("/", 1)[0] + "/pipeline"

            def shoot():
                started.wait()
                browser.get(url)
                enough.wait()
                time.sleep(2.5)  # the workers' and the client's next figures reach the page
                browser.save_screenshot(str(args.out))

            shooter = threading.Thread(target=shoot)
            shooter.start()
            done = 0
            started.set()
            for _ in p.stream(rows):
                done += 1
                if done == 2 * len(rows) // 3:
                    enough.set()
            enough.set()
            shooter.join()
            print(f"{args.out}: {done} rows; {p.last_report.summary()}")
    finally:
        browser.quit()


if __name__ == "__main__":
    main()
