"""`python -m pipeline scheduler` / `worker`: what they refuse and why, the shard a `--shard auto`
worker is given, the supervisor's restarts, and the compression every process must agree on.
The commands across real network hosts: test_hosts_netns.py; on loopback: test_multinode.py."""

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from helpers.rig_cluster import printed_address
from pipeline import Pipeline, load_config
from pipeline.cluster.hosts import exposure_error, visible_devices
from pipeline.cluster.supervisor import Backoff, Supervisor
from pipeline.config import ConfigError
from pipeline.scheduler.shard_claims import Claims, choose_shard

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = [sys.executable, "-m", "pipeline"]


def command(*args, timeout=60):
    return subprocess.run([*PIPELINE, *map(str, args)], capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def test_the_backoff_doubles_up_to_its_cap_and_starts_over_after_a_healthy_run():
    b = Backoff(first_s=1, cap_s=8, healthy_s=60)
    assert [b.after(2) for _ in range(5)] == [1, 2, 4, 8, 8]
    assert b.after(120) == 1 and b.after(1) == 2


def test_a_shard_is_claimed_once_and_a_rejoining_host_gets_its_own_back():
    shards = ["gpu0", "gpu1", "gpu2"]
    assert choose_shard(shards, served=set(), claimed={}, claimant="a") == "gpu0"
    assert choose_shard(shards, served={"gpu0"}, claimed={"gpu1": "b"}, claimant="a") == "gpu2"
    assert choose_shard(shards, served={"gpu0"}, claimed={"gpu1": "a"}, claimant="a") == "gpu1"  # its own claim
    assert choose_shard(shards, served=set(), claimed={}, claimant="a", prefer="gpu2") == "gpu2"
    assert choose_shard(shards, served={"gpu2"}, claimed={}, claimant="a", prefer="gpu2") == "gpu0"
    assert choose_shard(shards, served={"gpu0", "gpu1"}, claimed={"gpu2": "b"}, claimant="a") is None
    claims = Claims({"gpu0": ("a", 10.0), "gpu1": ("b", 30.0)})
    assert claims.live(now=20.0) == {"gpu1": "b"}  # a claim nobody made good on expires


def test_a_gpu_shard_indexes_the_gpus_its_host_gave_the_worker():
    assert visible_devices("3", [0]) == "3"
    assert visible_devices("4,5,6,7", [1, 3]) == "5,7"
    with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES=3"):
        visible_devices("3", [1])


def test_an_address_beyond_loopback_needs_tls_or_insecure(tmp_path):
    config = load_config()
    assert exposure_error("127.0.0.1", config, insecure=False) is None
    assert exposure_error("10.0.0.1", config, insecure=True) is None
    assert "refusing to listen beyond loopback without TLS" in exposure_error("0.0.0.0", config, insecure=False)
    tls = config.replace(security={"tls_ca_file": "ca.pem", "tls_cert": "c.pem", "tls_key": "k.pem"})
    assert exposure_error("10.0.0.1", tls, insecure=False) is None
    # the commands refuse before they bind anything
    done = command("scheduler", "--host", "10.213.250.1")
    assert done.returncode == 2 and "--insecure" in done.stderr and "Traceback" not in done.stderr
    done = command("worker", "tcp://127.0.0.1:8786", "--shard", "cpu0", "--host", "10.213.250.2")
    assert done.returncode == 2 and "without TLS" in done.stderr


def test_the_worker_command_says_what_is_missing():
    done = command("worker", "tcp://10.213.250.1:8786", "--shard", "cpu0")
    assert done.returncode == 2 and "give --host ADDRESS" in done.stderr
    done = command("worker", "tcp://127.0.0.1:8786", "--shard", "gpu9")
    assert done.returncode == 2 and "--shard gpu9: not in the config's shards (cpu0, cpu1)" in done.stderr
    done = command("worker", "tls://127.0.0.1:8786", "--shard", "cpu0")
    assert done.returncode == 2 and "must start with tcp://" in done.stderr
    done = command("run", "in.parquet", "out.parquet", "--nthreads", "4")  # only `worker` passes options on
    assert done.returncode == 2 and "unrecognized arguments: --nthreads 4" in done.stderr


def test_the_supervisor_restarts_its_child_until_stopped_and_not_after_a_usage_error():
    starts = []

    def start(supervisor):
        starts.append(time.monotonic())
        if len(starts) == 3:
            supervisor.stop()
        return subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(1)"])

    said = []
    s = Supervisor(start, said.append, backoff=Backoff(first_s=0.05, cap_s=0.1))
    assert s.run() == 0 and len(starts) == 3 and s.restarts == 2
    assert said[0].startswith("the Dask worker ended (exit code 1)")
    usage = Supervisor(lambda _: subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(2)"]), said.append)
    assert usage.run() == 2 and usage.restarts == 0


@pytest.mark.own_cluster
def test_a_compression_setting_that_differs_from_the_schedulers_is_an_error(tmp_path):
    def config_file(name, compression):
        cfg = {
            "shards": [{"name": "cpu0", "devices": [0]}],
            "engine": {"kind": "fake"},
            "network": {"compression": compression},
        }
        path = tmp_path / name
        path.write_text(yaml.safe_dump(cfg))
        return path

    raw = config_file("raw.yaml", "none")
    scheduler = subprocess.Popen(
        [
            *PIPELINE,
            "scheduler",
            "--port",
            "0",
            "--dashboard-address",
            "127.0.0.1:0",
            "--config",
            raw,
            "--log-file",
            tmp_path / "scheduler.log",
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        address, _ = printed_address(scheduler)
        compressed = config_file("compressed.yaml", "auto")
        done = command("worker", address, "--shard", "cpu0", "--config", compressed, timeout=120)
        assert done.returncode == 2
        assert (
            "network.compression differs: the scheduler " + address + " runs none, this worker's config says "
            "auto (zlib-ng between hosts)" in done.stderr
        )
        with pytest.raises(ConfigError, match="network.compression differs"):
            Pipeline(load_config(compressed).replace(scheduler={"address": address})).start()
    finally:
        scheduler.terminate()
        scheduler.wait(30)


@pytest.mark.own_cluster
def test_a_scheduler_whose_port_is_taken_says_so_and_one_killed_takes_its_dask_process_along(tmp_path):
    first = subprocess.Popen(
        [
            *PIPELINE,
            "scheduler",
            "--port",
            "0",
            "--log-file",
            tmp_path / "first.log",
            "--dashboard-address",
            "127.0.0.1:0",
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        address, _ = printed_address(first)
        port = address.rsplit(":", 1)[1]
        second = command(
            "scheduler",
            "--port",
            port,
            "--log-file",
            tmp_path / "second.log",
            "--dashboard-address",
            "127.0.0.1:0",
            timeout=120,
        )
        assert second.returncode == 1 and "pipeline: error: the scheduler exited at start" in second.stderr
        dask_scheduler = psutil.Process(first.pid).children()[0]
        first.kill()  # the command dies without a word: its Dask scheduler must not outlive it
        dask_scheduler.wait(30)
    finally:
        first.kill()
        first.wait()


@pytest.mark.own_cluster
def test_a_scheduler_without_the_pipelines_preload_cannot_say_its_settings_or_hand_out_shards(tmp_path):
    """Dask answers an operation it has no handler for with None, not an error: a client is not
    checked against such a scheduler, and a `--shard auto` worker is told what is missing."""
    scheduler_file = tmp_path / "scheduler.json"
    plain = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distributed.cli.dask_scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-dashboard",
            "--scheduler-file",
            scheduler_file,
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() or not scheduler_file.read_text():
            assert time.monotonic() < deadline and plain.poll() is None, "the scheduler did not start"
            time.sleep(0.1)
        time.sleep(0.2)
        address = __import__("json").loads(scheduler_file.read_text())["address"]
        from distributed import Client

        from pipeline.cluster.local import check_scheduler_settings

        with Client(address, timeout=30) as client:
            check_scheduler_settings(client, load_config().replace(scheduler={"address": address}))
        done = command("worker", address, "--shard", "auto", timeout=120)
        assert done.returncode == 2
        assert f"the scheduler {address} does not run the pipeline's preload (--shard auto needs it)" in done.stderr
    finally:
        plain.terminate()
        plain.wait(30)
