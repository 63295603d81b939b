"""Real vLLM engines on real network hosts: three network namespaces (helpers/netns.py), the
scheduler and the client on the first, `python -m pipeline worker` with a CPU engine on each of the
others. A worker host's link is cut for 40 s mid-job, then healed: no row lost or doubled, every
answer on its own row, the host registered again, and its engine, started again, answers the
next job. Runs before the session cluster (own_cluster), so engines never overlap.
"""

import sys
import time
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))  # the rig's helpers

from helpers.netns import netns_hosts  # noqa: E402,F401 - the fixture
from helpers.rig_cluster import RigCluster, read_output, rig_config, write_rows  # noqa: E402
from pipeline.bench.workloads import document_questions  # noqa: E402

pytestmark = [pytest.mark.engine, pytest.mark.own_cluster]


def real_engine_config() -> dict:
    config = rig_config(["cpu0", "cpu1"])
    config["engine"] = {"kind": "vllm", "enforce_eager": True, "max_num_seqs": 16, "block_size": 32}
    config["sampling"] = {"max_tokens": 24, "temperature": 0.0}
    config["advanced"]["intake"]["max_in_flight"] = 16
    config["advanced"]["jobs"]["bucket_rows"] = 24  # (answers come bucket by bucket: the cut lands mid-job)
    return config


def test_a_worker_host_cut_for_40_s_mid_job_on_real_engines(netns_hosts, tmp_path):
    c = RigCluster(netns_hosts(3), tmp_path, real_engine_config())
    try:
        c.start()
        rows = document_questions(60, 4, seed=62, order="shuffled")
        out = tmp_path / "out.parquet"
        job = c.start_run([write_rows(tmp_path / "in.parquet", rows), out])
        cut_worker = c.served()["cpu1"]
        partial = out.parent / (out.name + ".partial")
        c.wait_for(
            lambda: list(partial.glob("answers/p*/*.parquet")) or job.poll() is not None, 300, "the first answers"
        )
        c.rig[2].cut()
        time.sleep(40)
        c.rig[2].heal()
        t_heal = time.monotonic()
        rejoined = c.wait_for(
            lambda: c.served().get("cpu1") not in (None, cut_worker) and time.monotonic(),
            60,
            "cpu1's worker to register again",
        )
        print(f"real engines: cpu1 registered again {rejoined - t_heal:.1f} s after a 40 s cut")
        _, stderr = job.communicate(timeout=600)
        assert job.returncode == 0, stderr
        got = read_output(out)
        assert [r["id"] for r in got] == [r["id"] for r in rows] and max(Counter(r["id"] for r in got).values()) == 1
        assert [r["error"] for r in got if r["error"]] == []
        right = sum(row["expected"].lower() in (r["answer"] or "").lower() for row, r in zip(rows, got))
        assert right >= 0.8 * len(rows), right  # each answer on its own row
        # the host's new worker builds its engine again and answers the next job
        again = document_questions(20, 2, seed=63, order="shuffled")
        done = c.run([write_rows(tmp_path / "in2.parquet", again), tmp_path / "out2.parquet"])
        assert done.returncode == 0, done.stderr
        got = read_output(tmp_path / "out2.parquet")
        assert [r["id"] for r in got] == [r["id"] for r in again] and {r["shard"] for r in got} == {"cpu0", "cpu1"}
    finally:
        c.stop()
