"""The pipeline across real network hosts: three network namespaces on one bridge
(helpers/netns.py), each with its own address. The scheduler and the client run on the first
host, one `python -m pipeline worker` on each other host, started as docs/operating.md says.
Links are cut and shaped while the processes run. Fake engines: what is checked here is the
network's part (rows, rejoin, compression, TLS). A worker host cut for 40 s and healed, its worker
registered again and its engine answering the next job: tests/engine/test_hosts_netns_engine.py,
with real vLLM engines.
"""

import time
from collections import Counter

import pytest

from helpers.certs import write_certs
from helpers.netns import netns_hosts  # noqa: F401 - the fixture
from helpers.rig_cluster import RigCluster, read_output, rig_config, write_rows
from pipeline.bench.workloads import document_questions

pytestmark = pytest.mark.own_cluster


def check_rows(out, rows):
    """Every input row once, in input order, answered without error."""
    got = read_output(out)
    assert [r["id"] for r in got] == [r["id"] for r in rows]
    assert max(Counter(r["id"] for r in got).values()) == 1
    assert [r["error"] for r in got if r["error"]] == []
    return got


@pytest.fixture
def cluster(netns_hosts, tmp_path):
    made = []

    def make(config=None, hosts=3, start=True):
        c = RigCluster(netns_hosts(hosts), tmp_path, config or rig_config(["cpu0", "cpu1"]))
        made.append(c)
        return c.start() if start else c

    yield make
    for c in made:
        c.stop()


def answered_files(out):
    return list((out.parent / (out.name + ".partial")).glob("answers/p*/*.parquet"))


def test_a_host_cut_for_good_has_its_buckets_answered_by_the_others(cluster, tmp_path):
    config = rig_config(["cpu0", "cpu1"], null_latency_s=0.02)
    config["advanced"]["recovery"]["rejoin_timeout_s"] = 10
    c = cluster(config)
    rows = document_questions(400, 4, seed=57, order="shuffled")
    out = tmp_path / "out.parquet"
    job = c.start_run([write_rows(tmp_path / "in.parquet", rows), out])
    c.wait_for(lambda: answered_files(out) or job.poll() is not None, 60, "the first answers")
    c.rig[2].cut()
    t_cut = time.monotonic()
    stdout, stderr = job.communicate(timeout=300)
    took = time.monotonic() - t_cut
    assert job.returncode == 0, stderr
    got = check_rows(out, rows)
    # Dask drops the cut worker after its TCP timeout (30 s); the client then waits rejoin_timeout_s
    rejoin_s = config["advanced"]["recovery"]["rejoin_timeout_s"]
    print(f"the job ended {took:.1f} s after the cut (TCP timeout 30 s + rejoin_timeout_s {rejoin_s} s)")
    assert took < 30 + rejoin_s + 30
    assert "gone" in stdout + stderr and "cpu1" in stdout + stderr  # the summary says what happened
    # (the cut host's worker goes on writing to the shared output while cut: rows it committed stay
    # its own, the first answer of each row is kept, and the rest were answered on cpu0)
    assert {r["shard"] for r in got} <= {"cpu0", "cpu1"}


def test_the_scheduler_restarted_workers_rejoin_and_the_rerun_resumes(cluster, tmp_path):
    c = cluster(rig_config(["cpu0", "cpu1"], null_latency_s=0.02))
    rows = document_questions(500, 4, seed=58, order="shuffled")
    out = tmp_path / "out.parquet"
    job = c.start_run([write_rows(tmp_path / "in.parquet", rows), out])
    c.wait_for(lambda: len(answered_files(out)) >= 2 or job.poll() is not None, 60, "the first answers")
    before = c.served()
    # the scheduler's host loses its processes: the scheduler and the client die with them
    for proc in (c.scheduler, job):
        for child in __import__("psutil").Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()
    c.start_scheduler()
    served = c.wait_for(
        lambda: (s := c.served()) and set(s) == {"cpu0", "cpu1"} and s,
        90,
        "both workers to register with the new scheduler",
    )
    assert not set(served.values()) & set(before.values())  # new Dask workers, started by their supervisors
    done = c.run([tmp_path / "in.parquet", out])
    assert done.returncode == 0, done.stderr
    assert "already written before this run" in done.stdout + done.stderr  # it resumed
    check_rows(out, rows)


def test_a_job_across_three_hosts_on_a_slow_link_with_and_without_compression(cluster, tmp_path):
    """10 Mbit/s links: the same job with network.compression none and auto (the default), every
    row once and in order on both shards each time; the bytes that cross the workers' links, and the
    job's time."""
    rows = document_questions(300, 4, seed=59, order="shuffled")
    write_rows(tmp_path / "in.parquet", rows)
    figures = {}
    for setting in ("none", "auto"):
        config = rig_config(["cpu0", "cpu1"])
        config["network"] = {"compression": setting}
        c = cluster(config, start=False)
        for h in c.rig.hosts:
            h.shape("10mbit")
        c.start()
        before = [sum(h.link_bytes()) for h in c.rig.hosts]
        t0 = time.monotonic()
        done = c.run([tmp_path / "in.parquet", tmp_path / f"out-{setting}.parquet"])
        took = time.monotonic() - t0
        assert done.returncode == 0, done.stderr
        assert {r["shard"] for r in check_rows(tmp_path / f"out-{setting}.parquet", rows)} == {"cpu0", "cpu1"}
        moved = [sum(h.link_bytes()) - b for h, b in zip(c.rig.hosts, before)]
        figures[setting] = (sum(moved[1:]), took)
        c.stop()
    print(
        "10 Mbit/s, worker links' bytes and job seconds:",
        figures,
        f"ratio {figures['none'][0] / figures['auto'][0]:.1f}x",
    )
    assert figures["auto"][0] <= figures["none"][0] / 2


def test_tls_across_hosts_a_worker_without_the_clusters_certificate_cannot_join(cluster, tmp_path, netns_hosts):
    rig = netns_hosts(3)
    config = rig_config(["cpu0", "cpu1"])
    config["security"] = write_certs(tmp_path / "tls", [h.address for h in rig.hosts])
    c = RigCluster(rig, tmp_path, config)
    try:
        c.start()
        assert c.address.startswith("tls://") and all(a.startswith("tls://") for a in c.served().values())
        rows = document_questions(50, 2, seed=60, order="shuffled")
        done = c.run([write_rows(tmp_path / "in.parquet", rows), tmp_path / "out.parquet"])
        assert done.returncode == 0, done.stderr
        check_rows(tmp_path / "out.parquet", rows)
        # a worker whose certificate another CA signed: the scheduler refuses its handshake
        rogue = {**config, "security": write_certs(tmp_path / "rogue", [rig[1].address], name="another CA")}
        (tmp_path / "rogue.yaml").write_text(__import__("yaml").safe_dump(rogue))
        intruder = c.start_worker(
            1, shard="auto", config=tmp_path / "rogue.yaml", name="intruder", extra=["--no-restart"]
        )
        code = intruder.wait(60)
        said = (tmp_path / "supervisor-h1.log").read_text()
        print(said[-600:])
        assert code == 2 and "TLS" in said
        assert len(c.served(wait_s=30)) == 2  # (the scheduler may answer slowly after the refused handshakes)
    finally:
        c.stop()
