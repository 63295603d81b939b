import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import ConfigError, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]


def test_default_cluster_yaml_is_this_machines_cpu_shards_on_loopback():
    from pipeline.config.layout import usable_cores, visible_gpus

    cfg = load_config()
    if len(usable_cores()) == 2 and not visible_gpus():  # this project's box
        assert [(s.name, s.kind, s.devices) for s in cfg.shards] == [("cpu0", "cpu", [0]), ("cpu1", "cpu", [1])]
    assert cfg.scheduler.host == "127.0.0.1"
    assert cfg.scheduler.dashboard_address.startswith("127.0.0.1:")
    env = cfg.shards[-1].worker_env()
    assert env["PIPELINE_SHARD"] == cfg.shards[-1].name and env["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_gpu_shard_pins_cuda_device():
    cfg = parse_config({"shards": [{"name": "g3", "kind": "gpu", "device": 3}]})
    assert cfg.shards[0].worker_env()["CUDA_VISIBLE_DEVICES"] == "3"


def test_engine_env_defaults_load_the_compile_cache_and_a_shard_env_overrides_them():
    cfg = parse_config(
        {"shards": [{"name": "a", "device": 0}, {"name": "b", "device": 1, "env": {"VLLM_USE_AOT_COMPILE": "1"}}]}
    )
    a, b = (s.worker_env() for s in cfg.shards)
    assert a["VLLM_USE_AOT_COMPILE"] == "0" and a["SPT_NOENV"] == "1"
    assert b["VLLM_USE_AOT_COMPILE"] == "1"


def _write(tmp_path, text):
    p = tmp_path / "cluster.yaml"
    p.write_text(text)
    return p


def test_unknown_key_is_named(tmp_path):
    p = _write(tmp_path, "shards: [{name: a, device: 0}]\nengine: {max_model_length: 10}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "engine.max_model_length: unknown key" in str(e.value)


def test_bad_value_is_named_with_what_was_given(tmp_path):
    p = _write(tmp_path, "shards: [{name: a, device: 0}]\nsampling: {max_tokens: -5}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "sampling.max_tokens" in str(e.value) and "-5" in str(e.value)


def test_shards_default_to_auto_and_names_must_be_unique(tmp_path):
    from pipeline.config.layout import check_layout, usable_cores, visible_gpus

    default = load_config(_write(tmp_path, "engine: {}\n"))  # no shards key
    auto = parse_config({"shards": "auto"})
    assert default.shards == auto.shards
    assert default.shards and check_layout(default) == []  # this machine's devices, none twice
    have = visible_gpus() or usable_cores()
    assert all(d in have for s in default.shards for d in s.devices)
    assert default.shard_names == [f"{default.shards[0].kind}{i}" for i in range(len(default.shards))]
    with pytest.raises(ConfigError, match="repeated: a"):
        load_config(_write(tmp_path, "shards: [{name: a, device: 0}, {name: a, device: 1}]\n"))


def test_bad_yaml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(_write(tmp_path, "shards: [\n"))
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")


def test_a_key_given_twice_is_an_error_naming_it_and_both_lines(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text(
        "engine:\n  kind: fake\n  max_num_seqs: 4\n  kind: vllm\n"
        "shards:\n  - {name: a, devices: [0]}\n  - name: b\n    devices: [1]\n    name: c\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"invalid config {path}:\n  engine.kind: given twice, on lines 2 and 4\n"
        f"  shards.1.name: given twice, on lines 7 and 9"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "check-config", str(path)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=120,
    )
    assert done.returncode == 2 and "engine.kind: given twice, on lines 2 and 4" in done.stderr


def test_cli_reports_config_error_without_traceback(tmp_path):
    p = _write(tmp_path, "shards: [{name: a, device: 0}]\nadvanced: {intake: {max_in_flight: 0}}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "check-config", str(p)], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 2
    assert "advanced.intake.max_in_flight" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_replace_merges_sections():
    cfg = load_config().replace(scheduler={"dashboard_address": None}, sampling={"max_tokens": 8})
    assert cfg.scheduler.dashboard_address is None and cfg.scheduler.host == "127.0.0.1"
    assert cfg.sampling.max_tokens == 8


def test_security_needs_all_three_tls_files():
    with pytest.raises(ConfigError, match="tls_ca_file, tls_cert and tls_key together"):
        parse_config({"shards": [{"name": "a", "device": 0}], "security": {"tls_ca_file": "/ca.pem"}})
    cfg = parse_config(
        {
            "shards": [{"name": "a", "device": 0}],
            "security": {"tls_ca_file": "/ca.pem", "tls_cert": "/c.pem", "tls_key": "/k.pem"},
        }
    )
    assert cfg.security.enabled


def test_engine_kind_and_recovery_are_checked():
    with pytest.raises(ConfigError) as err:
        parse_config(
            {
                "shards": [{"name": "a", "device": 0}],
                "engine": {"kind": "mock"},
                "advanced": {"recovery": {"rejoin_timeout_s": -1, "max_row_attempts": 0}},
            }
        )
    text = str(err.value)
    assert (
        "engine.kind" in text
        and "advanced.recovery.rejoin_timeout_s" in text
        and "advanced.recovery.max_row_attempts" in text
    )


def test_auto_dtype_follows_the_cpus_bf16_support(tmp_path, monkeypatch):
    from pipeline.worker import vllm_engine as engine

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 fma\n")
    assert not engine.cpu_has_bf16(str(info))
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile\n")
    assert engine.cpu_has_bf16(str(info))
    config = load_config()
    assert config.engine.dtype == "auto"
    monkeypatch.setattr(engine, "cpu_has_bf16", lambda: False)
    assert engine.engine_dtype(config) == "float32"
    monkeypatch.setattr(engine, "cpu_has_bf16", lambda: True)
    assert engine.engine_dtype(config) == "bfloat16"
    gpu = config.replace(shards=[{"name": "g0", "kind": "gpu", "device": 0}])
    assert engine.engine_dtype(gpu) == "auto"  # vLLM's: the model's dtype
    assert engine.engine_dtype(config.replace(engine={"dtype": "bfloat16"})) == "bfloat16"


def test_worker_memory_is_auto_a_size_or_zero_and_a_bad_one_is_named():
    import psutil

    shards = [{"name": "a", "device": 0}]
    auto = parse_config({"shards": shards}).jobs
    assert auto.worker_memory == "auto"
    assert auto.worker_memory_bytes(2) == int(0.4 * psutil.virtual_memory().total / 2)

    def jobs(**keys):
        return parse_config({"shards": shards, "advanced": {"jobs": keys}}).jobs

    assert jobs(worker_memory="8GB").worker_memory_bytes(2) == 8 * 10**9
    assert jobs(worker_memory=0).worker_memory_bytes(2) == 0
    with pytest.raises(ConfigError) as err:
        jobs(worker_memory="lots")
    assert "advanced.jobs.worker_memory: must be auto, 0 or a size such as 8GB (got 'lots')" in str(err.value)


def test_the_fake_engine_reads_naturally_and_its_old_name_null_still_loads_with_a_note(tmp_path):
    """YAML reads a bare `null` as None: `kind: null` once failed with "Input should be 'vllm' or
    'null' (got None)". Now `fake` is the name; `null`, bare or quoted, loads as fake with a note."""
    import warnings

    from pipeline.config import ConfigNote

    for text in ("engine: {kind: null}\n", 'engine: {kind: "null"}\n'):
        with pytest.warns(ConfigNote, match=r"engine kind null is now called fake .*write `kind: fake`"):
            assert load_config(_write(tmp_path, text)).engine.kind == "fake"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = load_config(_write(tmp_path, "engine: {kind: fake}\n"))
        assert config.engine.kind == "fake"
        assert config.replace(sampling={"max_tokens": 8}).engine.kind == "fake"  # (what workers get: no note)
    with pytest.raises(ConfigError, match=r"engine.kind: Input should be 'vllm' or 'fake' \(got 'nul'\)"):
        load_config(_write(tmp_path, "engine: {kind: nul}\n"))


@pytest.mark.parametrize(
    "yaml_text, note, shown",
    [
        (
            "engine: {kind: null}\n",
            "note: engine kind null is now called fake (in YAML a bare null means no value); "
            "write `kind: fake` (or --engine fake)",
            '"kind": "fake"',
        ),
        (
            "routing: {max_blocks: 1000}\n",
            "note: routing: is now under advanced: (advanced.routing); indent it under an advanced: section",
            '"max_blocks": 1000',
        ),
    ],
    ids=["old-engine-name", "old-tuning-section"],
)
def test_the_command_line_prints_an_old_spelling_note_once(tmp_path, yaml_text, note, shown):
    p = _write(tmp_path, yaml_text)
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "check-config", str(p)], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [note]
    assert shown in proc.stdout


# -- advanced: the tuning sections --------------------------------------------------------------


def test_the_repositorys_cluster_yaml_has_the_tuning_sections_under_advanced_and_loads_without_a_note():
    import warnings

    import yaml

    data = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    assert not {"intake", "routing", "recovery", "jobs"} & set(data)
    assert {"intake", "recovery", "jobs"} <= set(data["advanced"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = load_config()
        assert config.intake is config.advanced.intake and config.intake.max_in_flight == 96
        assert config.jobs.bucket_rows == 50_000 and config.recovery.max_row_attempts == 3
        again = parse_config(config.model_dump(mode="json"))  # (what a resident cluster's workers read)
        assert again == config and set(config.model_dump()) >= {"advanced"}
        assert not {"intake", "routing", "recovery", "jobs"} & set(config.model_dump())


def test_tuning_sections_at_the_top_level_are_read_under_advanced_with_a_note(tmp_path):
    from pipeline.config import ConfigNote

    text = "intake: {max_in_flight: 7}\nrecovery: {max_row_attempts: 5}\nadvanced: {jobs: {bucket_rows: 9}}\n"
    with pytest.warns(ConfigNote) as notes:
        config = load_config(_write(tmp_path, text))
    assert [str(n.message) for n in notes] == [
        "intake: and recovery: are now under advanced: (advanced.intake, advanced.recovery); indent them under "
        "an advanced: section"
    ]
    assert (config.intake.max_in_flight, config.recovery.max_row_attempts, config.jobs.bucket_rows) == (7, 5, 9)
    assert config.advanced.intake.max_in_flight == 7
    assert config.intake.concurrent_batches == 4  # (the section's other keys: their defaults)
    with pytest.warns(ConfigNote, match=r"^jobs: is now under advanced: \(advanced.jobs\); indent it under"):
        parse_config({"jobs": {"partition_rows": 10}})


def test_a_tuning_section_given_at_the_top_level_and_under_advanced_is_an_error_naming_both(tmp_path):
    text = "intake: {max_in_flight: 7}\nadvanced: {intake: {max_in_flight: 8}}\n"
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, text))
    assert "intake: and advanced.intake: are one section, given twice: keep advanced.intake" in str(err.value)


def test_an_unknown_key_under_advanced_is_one_line_naming_its_path(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, "advanced:\n  intake: {xyz: 1}\n"))
    assert str(err.value).splitlines()[1:] == ["  advanced.intake.xyz: unknown key"]
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, "advanced: {engine: {max_num_seqs: 8}}\n"))
    assert str(err.value).splitlines()[1:] == ["  advanced.engine: unknown key"]
    with pytest.warns(Warning), pytest.raises(ConfigError) as err:  # (the old place: the same line, and the note)
        load_config(_write(tmp_path, "intake: {xyz: 1}\n"))
    assert str(err.value).splitlines()[1:] == ["  advanced.intake.xyz: unknown key"]


def test_replace_merges_into_one_tuning_section_and_keeps_the_others():
    import warnings

    base = load_config().replace(jobs={"bucket_rows": 11}, recovery={"poll_interval_s": 0.25})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (the code's own spelling: no note)
        config = base.replace(intake={"max_in_flight": 4})
        nested = base.replace(advanced={"intake": {"concurrent_batches": 2}}, recovery={"max_row_attempts": 9})
    assert config.intake.max_in_flight == 4 and config.intake.concurrent_batches == 4
    assert config.jobs.bucket_rows == 11 and config.jobs.partition_rows == 65_536
    assert config.recovery == base.recovery and config.routing == base.routing
    assert nested.intake.concurrent_batches == 2 and nested.intake.max_in_flight == 96
    assert (nested.recovery.max_row_attempts, nested.recovery.poll_interval_s) == (9, 0.25)
    assert nested.jobs.bucket_rows == 11
    with pytest.raises(ConfigError, match=r"advanced.intake.max_in_flight: Input should be greater than 0"):
        base.replace(intake={"max_in_flight": 0})
