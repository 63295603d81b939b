"""Shard layouts: ``shards: auto`` on machines of several shapes, multi-device shards and their
environment, and the layouts refused with one line each."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import load_config
from pipeline.config import ConfigError, parse_config
from pipeline.config.layout import auto_shards, check_layout
from pipeline.worker.vllm_engine import engine_kwargs

ROOT = Path(__file__).resolve().parents[2]


def test_auto_layouts_for_gpu_and_cpu_machines():
    assert [s["devices"] for s in auto_shards({}, gpus=[0, 1, 2, 3])] == [[0], [1], [2], [3]]
    two = auto_shards({"gpus_per_shard": 2}, gpus=[0, 1, 2, 3])
    assert [(s["name"], s["kind"], s["devices"]) for s in two] == [("gpu0", "gpu", [0, 1]), ("gpu1", "gpu", [2, 3])]
    # small machines: a shard per core, none reserved (this project's 2-core box: cpu0, cpu1)
    assert [s["devices"] for s in auto_shards({}, gpus=[], cores=[0, 1])] == [[0], [1]]
    # larger: core 0 left to the client and scheduler, 4 cores per shard
    assert [s["devices"] for s in auto_shards({}, gpus=[], cores=list(range(16)))] == [
        [1, 2, 3, 4],
        [5, 6, 7, 8],
        [9, 10, 11, 12],
    ]
    assert [
        s["devices"]
        for s in auto_shards({"cpu_cores_per_shard": 2, "reserve_cores": 0}, gpus=[], cores=[0, 1, 2, 3, 4, 5])
    ] == [[0, 1], [2, 3], [4, 5]]
    assert auto_shards({"env": {"A": "1"}}, gpus=[], cores=[0])[0]["env"] == {"A": "1"}


def test_default_config_is_auto_and_lists_still_work():
    config = load_config()
    assert [s.name for s in config.shards] == [f"cpu{i}" for i in range(len(config.shards))]
    listed = parse_config({"shards": [{"name": "a", "device": 1}, {"name": "b", "devices": [2, 3]}]})
    assert [s.devices for s in listed.shards] == [[1], [2, 3]]
    with pytest.raises(ConfigError, match="with scheduler.address set, list the shards"):
        parse_config({"scheduler": {"address": "tcp://10.0.0.1:8786"}})


def test_multi_device_shard_environment_and_engine_arguments():
    config = parse_config(
        {
            "shards": [
                {"name": "big", "kind": "gpu", "devices": [0, 1, 2, 3]},
                {"name": "cpu", "devices": [0, 1, 2, 3], "tensor_parallel_size": 2},
                {"name": "odd", "devices": [4, 6]},
            ]
        }
    )
    big, cpu, odd = config.shards
    assert big.worker_env()["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and big.tensor_parallel == 4
    assert engine_kwargs("m", config, big)["tensor_parallel_size"] == 4
    assert cpu.worker_env()["VLLM_CPU_OMP_THREADS_BIND"] == "0-1|2-3"  # one core range per rank
    assert odd.worker_env()["VLLM_CPU_OMP_THREADS_BIND"] == "4,6" and "tensor_parallel_size" not in engine_kwargs(
        "m", config, odd
    )


def test_engines_are_eager_on_cpu_shards_and_compiled_on_gpus_unless_the_config_says():
    config = parse_config({"shards": [{"name": "g", "kind": "gpu", "device": 0}, {"name": "c", "device": 0}]})
    gpu, cpu = config.shards
    assert config.engine.enforce_eager == "auto"
    assert engine_kwargs("m", config, gpu)["enforce_eager"] is False  # CUDA graphs
    assert engine_kwargs("m", config, cpu)["enforce_eager"] is True  # no compile wait on CPU
    for setting in (True, False):
        fixed = config.replace(engine={"enforce_eager": setting})
        assert {engine_kwargs("m", fixed, s)["enforce_eager"] for s in fixed.shards} == {setting}
    with pytest.raises(ConfigError, match="engine.enforce_eager"):
        config.replace(engine={"enforce_eager": "sometimes"})


def test_impossible_layouts_are_refused_one_line_each(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_attention_heads": 9, "num_key_value_heads": 3}))
    config = parse_config(
        {
            "shards": [
                {"name": "a", "devices": [0, 1], "tensor_parallel_size": 2},
                {"name": "b", "devices": [1, 7]},
                {"name": "c", "devices": [2, 3, 4], "tensor_parallel_size": 2},
            ]
        }
    )
    assert check_layout(config, str(model), gpus=[], cores=[0, 1, 2, 3, 4]) == [
        "shards: core 1 is in two shards, a and b",
        "shards.b: core 7 does not exist on this machine (cores: 0, 1, 2, 3, 4)",
        "shards.a: tensor_parallel_size 2 cannot split the model's 9 attention heads and 3 KV heads; "
        "sizes that can: 1, 3",
        "shards.c: tensor_parallel_size 2 does not divide its 3 device(s)",
        "shards.c: tensor_parallel_size 2 cannot split the model's 9 attention heads and 3 KV heads; "
        "sizes that can: 1, 3",
    ]
    gpus = parse_config({"shards": [{"name": "g", "kind": "gpu", "devices": [0, 1, 2, 3]}]})
    assert check_layout(gpus, None, gpus=[0, 1]) == ["shards.g: GPU 2, 3 does not exist on this machine (GPUs: 0, 1)"]
    assert check_layout(gpus, None, local=False) == []  # other machines' devices are theirs to check
    # one GPU per host (pods, Slurm jobs): each host's GPU 0 is its own
    pods = parse_config({"shards": [{"name": f"gpu{i}", "kind": "gpu", "devices": [0]} for i in range(3)]})
    assert check_layout(pods, None, local=False) == []
    assert check_layout(pods, None, gpus=[0]) == [
        "shards: GPU 0 is in two shards, gpu0 and gpu1",
        "shards: GPU 0 is in two shards, gpu0 and gpu2",
    ]
    with pytest.raises(ConfigError, match="a device is listed twice"):
        parse_config({"shards": [{"name": "x", "devices": [0, 0]}]})


def test_check_config_prints_the_layout_or_the_refusal(tmp_path):
    ok = subprocess.run(
        [sys.executable, "-m", "pipeline", "check-config"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert ok.returncode == 0 and "shards:\n  cpu0: cpu, cores 0" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("shards:\n  - {name: a, devices: [0, 1], tensor_parallel_size: 2}\n  - {name: b, devices: [1]}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "check-config", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2 and "the shard layout cannot run:" in proc.stderr
    assert "shards: core 1 is in two shards, a and b" in proc.stderr and "Traceback" not in proc.stderr


def test_ranks_pinned_by_hand_must_match_the_tensor_parallel_size():
    config = parse_config(
        {
            "shards": [
                {
                    "name": "ok",
                    "devices": [0, 1],
                    "tensor_parallel_size": 3,
                    "env": {"VLLM_CPU_OMP_THREADS_BIND": "0|1|0"},
                },
                {"name": "bad", "devices": [2], "tensor_parallel_size": 3, "env": {"VLLM_CPU_OMP_THREADS_BIND": "2|2"}},
            ]
        }
    )
    assert config.shards[0].worker_env()["VLLM_CPU_OMP_THREADS_BIND"] == "0|1|0"
    assert check_layout(config, None, gpus=[], cores=[0, 1, 2]) == [
        "shards.bad: env VLLM_CPU_OMP_THREADS_BIND '2|2' pins 2 rank(s), tensor_parallel_size is 3"
    ]
