"""Which variables vLLM's engine processes inherit from a Dask worker, and the user's own
process left as it was by an embedded cluster."""

import os

import pytest

from pipeline import Pipeline, engine_env, load_config

DASK_KEYS = sorted(engine_env.dask_pre_spawn())


def test_the_nanny_variables_include_the_trim_threshold_and_hash_seed():
    assert {"MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS", "PYTHONHASHSEED"} <= set(DASK_KEYS)


def test_record_lists_what_the_users_environment_lacks():
    user = {"PATH": "/bin", "OMP_NUM_THREADS": "4", "PYTHONHASHSEED": "0"}
    record = engine_env.worker_record(user)[engine_env.ADDED_RECORD].split(",")
    assert "MALLOC_TRIM_THRESHOLD_" in record
    assert "OMP_NUM_THREADS" not in record  # the user's own value stays
    assert "PYTHONHASHSEED" in record  # "0" is replaced by the nanny


def test_engine_drops_dask_variables_but_keeps_the_users_and_the_shards():
    worker = {
        "PATH": "/bin",
        "MALLOC_TRIM_THRESHOLD_": "65536",
        "OMP_NUM_THREADS": "4",
        "MKL_NUM_THREADS": "1",
        "PYTHONHASHSEED": "6640",
        engine_env.ADDED_RECORD: "MALLOC_TRIM_THRESHOLD_,MKL_NUM_THREADS,PYTHONHASHSEED",
    }
    assert engine_env.engine_drop(worker) == ["MALLOC_TRIM_THRESHOLD_", "MKL_NUM_THREADS", "PYTHONHASHSEED"]
    # the shard's env names a variable: the engine gets it
    assert engine_env.engine_drop(worker, keep={"MKL_NUM_THREADS": "1"}) == ["MALLOC_TRIM_THRESHOLD_", "PYTHONHASHSEED"]


def test_a_worker_started_by_hand_treats_dasks_exact_defaults_as_dasks():
    worker = {
        "MALLOC_TRIM_THRESHOLD_": "65536",
        "OMP_NUM_THREADS": "8",
        "PYTHONHASHSEED": "6640",
        "__DASK_PARENT_PID": "7",
    }
    assert engine_env.engine_drop(worker) == ["MALLOC_TRIM_THRESHOLD_", "PYTHONHASHSEED", "__DASK_PARENT_PID"]


def test_engine_environment_holds_back_and_restores(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    monkeypatch.setenv(engine_env.ADDED_RECORD, "MALLOC_TRIM_THRESHOLD_")
    with engine_env.engine_environment() as held:
        assert held == {"MALLOC_TRIM_THRESHOLD_": "65536"}
        assert "MALLOC_TRIM_THRESHOLD_" not in os.environ
    assert os.environ["MALLOC_TRIM_THRESHOLD_"] == "65536"


def test_restore_undoes_changes_and_reports_them(monkeypatch):
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("USER_SETTING", "a")
    saved = engine_env.snapshot()
    os.environ.update({"MALLOC_TRIM_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1", "USER_SETTING": "b"})
    assert engine_env.restore(saved, engine_env.nanny_keys()) == ["MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS"]
    assert "MALLOC_TRIM_THRESHOLD_" not in os.environ and os.environ["OMP_NUM_THREADS"] == "3"
    assert os.environ["USER_SETTING"] == "b"  # only the nanny's variables
    assert engine_env.restore(saved) == ["USER_SETTING"]
    assert os.environ["USER_SETTING"] == "a"


def test_process_environ_sees_variables_set_below_python(monkeypatch):
    import ctypes

    monkeypatch.setenv("PIPELINE_TEST_SEEN", "1")
    libc = ctypes.CDLL(None)
    libc.setenv(b"PIPELINE_TEST_BELOW", b"2", 1)  # as GNU readline does for COLUMNS and LINES
    try:
        env = engine_env.process_environ()
        assert env["PIPELINE_TEST_SEEN"] == "1" and env["PIPELINE_TEST_BELOW"] == "2"
        assert "PIPELINE_TEST_BELOW" not in os.environ
    finally:
        libc.unsetenv(b"PIPELINE_TEST_BELOW")


def test_env_diff_ignores_pipeline_variables():
    d = engine_env.env_diff({"A": "1", "B": "2", "PIPELINE_SHARD": "x"}, {"B": "3", "C": "4"})
    assert d == {"only_a": {"A": "1"}, "only_b": {"C": "4"}, "differ": {"B": ("2", "3")}}


def test_read_environ_of_this_process_sees_start_up_variables():
    env = engine_env.read_environ(os.getpid())
    assert env.get("PATH") == os.environ.get("PATH")


@pytest.mark.own_cluster
def test_starting_and_closing_an_embedded_cluster_leaves_the_drivers_environment_unchanged(monkeypatch):
    for k in DASK_KEYS:  # as in a user's shell: none of Dask's worker variables
        monkeypatch.delenv(k, raising=False)
    before = dict(os.environ)
    config = load_config().replace(scheduler={"dashboard_address": None})
    p = Pipeline(config, engine="fake").start()
    try:
        assert dict(os.environ) == before
        # the workers themselves did get Dask's variables, and the record of them
        envs = p.client.run(lambda: {k: os.environ.get(k) for k in [*DASK_KEYS, engine_env.ADDED_RECORD]})
        for env in envs.values():
            assert env["MALLOC_TRIM_THRESHOLD_"] == "65536"
            assert "MALLOC_TRIM_THRESHOLD_" in env[engine_env.ADDED_RECORD].split(",")
        assert len(p.run([{"document": "d", "question": "q"}])) == 1
    finally:
        p.close()
    assert dict(os.environ) == before
