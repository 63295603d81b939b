"""Two jobs on the real engines at once: a small job started beside a big one is answered
within a fraction of the big one's time (fair admission, vLLM's priority policy, and the big
job's requests preempted while the small one runs: pipeline/worker/admission.py,
pipeline/worker/job_scheduler.py), and no answer of either suffers from the preemption."""

import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.bench.workloads import document_questions
from pipeline.jobs.job import prepare_job


def _share_right(rows, out) -> float:
    """The share of answers that hold their row's planted fact."""
    return sum(r["expected"].lower() in (o["answer"] or "").lower() for r, o in zip(rows, out)) / len(rows)


def test_a_small_job_beside_a_big_one_ends_long_before_it_with_right_answers(pipeline, tmp_path):
    big = document_questions(60, 3, seed=61, order="shuffled", id_prefix="big")
    small = document_questions(2, 2, seed=62, order="shuffled", id_prefix="small")
    for name, rows in (("big", big), ("small", small)):
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / f"{name}.parquet")
    summaries = {}

    def run(name):
        summaries[name] = prepare_job(
            tmp_path / f"{name}.parquet",
            tmp_path / f"{name}.out.parquet",
            config=pipeline.config,
            notify=lambda m: None,
        ).run(pipeline, progress=False)

    t0 = time.perf_counter()
    long = threading.Thread(target=run, args=("big",))
    long.start()
    time.sleep(4.0)  # the big job's rows fill both engines
    run("small")
    small_ended = time.perf_counter() - t0
    big_running = long.is_alive()
    long.join()
    big_s = summaries["big"].seconds
    assert big_running, f"the small job ended {small_ended:.1f} s in, after the big one ({big_s:.1f} s)"
    # first come, first served, it waited behind the big job's queued rows and ended with them
    assert summaries["small"].seconds < 0.5 * big_s, (summaries["small"].seconds, big_s)
    for name, rows in (("big", big), ("small", small)):
        out = pq.read_table(tmp_path / f"{name}.out.parquet").to_pylist()
        assert [o["id"] for o in out] == [r["id"] for r in rows]
        assert all(o["error"] is None for o in out)
        assert _share_right(rows, out) >= 0.75, (name, _share_right(rows, out))
