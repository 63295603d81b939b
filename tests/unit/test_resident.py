"""The resident local cluster's bookkeeping, without a cluster: state file, config mismatch,
stale state; and the worker-side prefix memory that carries what engines hold across jobs."""

import os
import socket
import subprocess
import sys

import psutil
import pytest

from pipeline.cluster import resident, resident_state, worker_spec
from pipeline.config import ConfigError, load_config
from pipeline.names import CLUSTER_DIR_ENV
from pipeline.prefix_memory import PrefixMemory, prefix_digest


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(CLUSTER_DIR_ENV, str(tmp_path))
    return tmp_path


@pytest.fixture
def listening():
    """A loopback port that accepts connections (stands in for a running scheduler)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield f"tcp://127.0.0.1:{s.getsockname()[1]}"
    s.close()


def _state(config, address, pid=None, model="m"):
    me = psutil.Process(pid) if pid else psutil.Process()
    return resident_state.ClusterState(
        address=address,
        dashboard=None,
        config_file="cfg.yaml",
        fingerprint=resident_state.fingerprint(config, model),
        processes={"scheduler": [me.pid, me.create_time()]},
        log_dir="logs",
    )


def test_state_file_round_trips_and_knows_its_processes(folder, listening):
    config = load_config()
    state = _state(config, listening)
    state.save(folder)
    loaded = resident_state.ClusterState.load(folder)
    assert loaded == state
    assert loaded.dead_processes() == [] and loaded.scheduler_reachable()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    loaded.processes["cpu0"] = [gone.pid, 0.0]
    assert loaded.dead_processes() == ["cpu0"]


def test_a_running_cluster_with_the_same_config_is_used(folder, listening):
    config = load_config()
    _state(config, listening).save(folder)
    # read-ahead and recovery are the client's: they may differ
    client_side = config.replace(intake={"read_ahead_rows": 8}, recovery={"max_row_attempts": 5})
    found = resident.find(client_side, "m", notify=pytest.fail)
    assert found is not None and found.address == listening


def test_a_running_cluster_with_another_config_is_a_clear_error(folder, listening):
    config = load_config()
    _state(config, listening).save(folder)
    other = config.replace(
        engine={"enforce_eager": True, "max_model_len": 1024}, sampling={"max_tokens": 8}, intake={"max_in_flight": 8}
    )
    with pytest.raises(resident_state.ClusterMismatch) as err:
        resident.find(other, "other-model", notify=pytest.fail)
    text = str(err.value)
    assert f"a local cluster is up at {listening} for another config" in text
    for line in (
        "engine.enforce_eager: running 'auto', this config True",
        "engine.max_model_len: running 2048, this config 1024",
        "advanced.intake.max_in_flight: running 96, this config 8",
        "model: running 'm', this config 'other-model'",
    ):
        assert line in text
    assert "python -m pipeline down" in text
    assert "sampling" not in text  # settings that travel with each job's batches are no mismatch
    assert (folder / resident_state.STATE_FILE).exists()  # never removed for a mismatch


def test_stale_state_is_said_and_removed_and_nothing_is_used(folder):
    config = load_config()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _state(config, "tcp://127.0.0.1:9", pid=None).save(folder)
    state = resident_state.ClusterState.load(folder)
    state.processes["scheduler"] = [gone.pid, 1.0]
    state.save(folder)
    said = []
    assert resident.find(config, "m", notify=said.append) is None
    assert (
        len(said) == 1 and "is no longer running (its scheduler process is gone); starting an embedded one" in said[0]
    )
    assert not (folder / resident_state.STATE_FILE).exists()


def test_an_unreadable_state_file_says_where_it_is(folder):
    (folder / resident_state.STATE_FILE).write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read the local cluster's state file .*remove it"):
        resident.find(load_config(), "m", notify=print)


def test_dask_settings_become_the_variables_dask_reads():
    env = worker_spec.dask_env(
        {
            "distributed.worker.daemon": False,
            "distributed.scheduler.work-stealing": False,
            "distributed.admin.tick.interval": "1s",
        }
    )
    assert env == {
        "DASK_DISTRIBUTED__WORKER__DAEMON": "False",
        "DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING": "False",
        "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "1s",
    }
    import dask
    import dask.config

    parsed = dask.config.collect_env(env)
    assert parsed["distributed"]["worker"]["daemon"] is False


# -- knowledge across jobs ------------------------------------------------------------


def test_prefix_memory_is_bounded_and_drops_the_least_recently_served():
    m = PrefixMemory(max_tokens=500)
    m.served_digest(prefix_digest("doc a"), 200)
    m.served_digest(prefix_digest("doc b"), 200)
    m.served_digest(prefix_digest("doc a"), 200)  # served again: most recent, not counted twice
    assert m.tokens == 400 and m.held() == [prefix_digest("doc b"), prefix_digest("doc a")]
    m.served_digest(prefix_digest("doc c"), 200)  # 600 > 500: "doc b" goes
    assert m.held() == [prefix_digest("doc a"), prefix_digest("doc c")] and m.tokens == 400
    m.clear()
    assert len(m) == 0 and m.tokens == 0


def test_prefix_digests_are_the_same_in_every_process():
    code = "from pipeline.prefix_memory import prefix_digest; print(prefix_digest('Ünï doc \\ud800'))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "123"},
    ).stdout
    assert int(out) == prefix_digest("Ünï doc \ud800")


def test_an_engine_start_error_becomes_one_line():
    from pipeline.cluster.start_progress import one_line

    error = (
        "ValidationError: 1 validation error for ModelConfig\n  Value error, User-specified max_model_len "
        "(999999) is too long. Set X. [type=value_error, input_value=ArgsKwargs((), {'a': 1}), input_type=A]\n"
        "    For further information visit https://errors.pydantic.dev/2.14/v/value_error"
    )
    assert one_line(error) == "ValidationError: User-specified max_model_len (999999) is too long. Set X."
    assert one_line("x" * 500).endswith("…") and len(one_line("x" * 500)) == 300


def test_an_embedded_and_a_resident_worker_start_from_one_description():
    config = load_config().replace(intake={"concurrent_batches": 3})
    shard = config.shards[0]
    spec = worker_spec.WorkerSpec(config, shard, starter_env={})
    nanny = spec.nanny()["options"]
    args = spec.command("tcp://127.0.0.1:8786")
    flag = {a: args[i + 1] for i, a in enumerate(args) if a.startswith("--") and i + 1 < len(args)}
    assert args[3] == "tcp://127.0.0.1:8786"
    assert flag["--name"] == nanny["name"] == shard.name
    assert flag["--host"] == nanny["host"] == "127.0.0.1"
    assert int(flag["--nthreads"]) == nanny["nthreads"] == 3
    assert flag["--memory-limit"] == str(nanny["memory_limit"]) and nanny["memory_limit"] > 0  # (spilling)
    assert flag["--resources"] == " ".join(f"{k}={v}" for k, v in nanny["resources"].items())
    assert f"{shard.resource}=" in flag["--resources"]
    assert [flag["--preload"]] == nanny["preload"] == ["pipeline.worker.preload"]
    env = spec.process_env({"HOME": "/home/u"})
    assert {k: env[k] for k in nanny["env"]} == nanny["env"]  # the shard's variables, the record
    assert env["PIPELINE_SHARD"] == shard.name and env["HOME"] == "/home/u"
    assert all(env[k] == v for k, v in worker_spec.dask_env(nanny["config"]).items())  # the Nanny's `config`
    assert nanny["config"]["distributed.worker.memory.target"] == 1.0  # spilled above memory_limit ...
    assert not any(nanny["config"][f"distributed.worker.memory.{k}"] for k in ("spill", "pause", "terminate"))
