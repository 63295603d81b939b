#!/usr/bin/env python
"""The fixed cost of a small file job on the cluster path: a 16-line OpenAI batch file of chat
requests (one ~600-character system document each), run four times on an embedded cluster of fake
engines (answers at once), so what is measured is the job's own steps: read, place, split,
answer, merge, finish. Prints each run's ``prepare_job`` and ``run`` times; the first run also
loads the task's modules on the workers.

    .venv/bin/python scripts/small_job_overhead.py [--lines 16] [--runs 4]
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from pipeline import Pipeline, load_config, prepare_job

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=16)
    ap.add_argument("--runs", type=int, default=4)
    args = ap.parse_args()
    doc = "The Nile is a river in Africa. " * 20
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.jsonl"
        src.write_text(
            "".join(
                json.dumps(
                    {
                        "custom_id": f"r{i}",
                        "method": "POST",
                        "url": "/v1/chat/completions",
                        "body": {
                            "messages": [
                                {"role": "system", "content": doc},
                                {"role": "user", "content": f"Question {i}?"},
                            ]
                        },
                    }
                )
                + "\n"
                for i in range(args.lines)
            )
        )
        config = load_config().replace(scheduler={"dashboard_address": None}, intake={"first_answer_rows": 0})
        with Pipeline(config, engine="fake") as p:
            for k in range(args.runs):
                t0 = time.perf_counter()
                job = prepare_job(src, Path(tmp) / f"out{k}.jsonl", config=p.config, notify=lambda m: None)
                t1 = time.perf_counter()
                job.run(p, progress=False)
                print(f"run {k + 1}: prepare_job {t1 - t0:.3f} s, run {time.perf_counter() - t1:.3f} s")
