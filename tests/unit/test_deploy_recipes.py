"""The deploy recipes under deploy/ (systemd units, Slurm via dask-jobqueue, Kubernetes via the
Dask operator), rendered and checked here without systemd, Slurm or Kubernetes: each recipe's
command line is one that ``python -m pipeline scheduler|worker`` accepts, and what it hands to
its tool is what that tool takes. Fast: no engine; the Slurm tests start only an in-process
scheduler."""

from __future__ import annotations

import copy
import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import dask
import dask_jobqueue  # noqa: F401 - the Slurm recipe's; a missing install fails here, not silently
import dask_kubernetes  # noqa: F401 - the Kubernetes recipe's CRD
import pytest
import yaml

from helpers.certs import write_certs
from pipeline.cli.main import parse_args

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
VENV_PYTHON = "/opt/pipeline/.venv/bin/python"


def parse(argv: list[str]):
    """``python -m pipeline ARGV`` as the command line parses it."""
    return parse_args(argv)


def pipeline_argv(words: list[str], python: str) -> list[str]:
    """The arguments after ``PYTHON -m pipeline`` in a command line's words."""
    assert words[:3] == [python, "-m", "pipeline"], words
    return words[3:]


# -- systemd -----------------------------------------------------------------------------------


def unit_entries(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A unit file's sections as (key, value) lists: systemd allows a key more than once."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
            continue
        key, _, value = line.partition("=")
        current.append((key.strip(), value.strip()))
    return sections


def unit_value(entries: list[tuple[str, str]], key: str) -> str:
    values = [v for k, v in entries if k == key]
    assert values, f"no {key}="
    return values[-1]


def env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def exec_start_words(entries: list[tuple[str, str]], instance: str, env: dict[str, str]) -> list[str]:
    """ExecStart= as systemd runs it: %i is the instance, ``${VAR}`` one word, a word ``$VAR``
    split at whitespace (none when empty)."""
    line = unit_value(entries, "ExecStart").replace("%i", instance)
    words = []
    for word in shlex.split(line):
        whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if whole:
            words += env.get(whole.group(1), "").split()
        else:
            words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), word))
    return words


def unit_env(entries: list[tuple[str, str]]) -> dict[str, str]:
    """Environment= lines, then the sample EnvironmentFile over them (systemd: the file wins)."""
    env = dict(assignment.split("=", 1) for k, v in entries if k == "Environment" for assignment in shlex.split(v))
    assert unit_value(entries, "EnvironmentFile") == "-/etc/pipeline/pipeline.env"
    return {**env, **env_file(DEPLOY / "systemd" / "pipeline.env")}


@pytest.mark.parametrize(
    "unit, command", [("pipeline-scheduler.service", "scheduler"), ("pipeline-worker@.service", "worker")]
)
def test_systemd_unit_restarts_and_runs_a_command_the_parser_accepts(unit, command):
    sections = unit_entries(DEPLOY / "systemd" / unit)
    service, before = sections["Service"], sections["Unit"]
    assert unit_value(service, "Restart") == "always"
    assert int(unit_value(service, "RestartSec")) > 0
    assert unit_value(service, "RestartPreventExitStatus") == "2"  # a usage error is not retried
    assert unit_value(service, "KillMode") == "mixed"
    assert int(unit_value(service, "TimeoutStopSec")) >= (120 if command == "worker" else 30)
    assert unit_value(service, "User") not in ("", "root")
    assert "network-online.target" in unit_value(before, "After")
    assert "network-online.target" in unit_value(before, "Wants")
    env = unit_env(service)
    args = parse(pipeline_argv(exec_start_words(service, "gpu0", env), VENV_PYTHON))
    assert args.command == command and args.config == "/etc/pipeline/cluster.yaml" and args.log_file == "-"
    if command == "scheduler":
        assert (args.host, args.port, args.dashboard_address) == ("10.0.0.1", 8786, "10.0.0.1:8787")
    else:
        assert (args.scheduler_address, args.shard, args.host) == ("tls://10.0.0.1:8786", "gpu0", "10.0.0.2")
        assert args.dask_args == []
        # without the EnvironmentFile the address is left out: the command reads $DASK_SCHEDULER_ADDRESS
        bare = exec_start_words(
            service,
            "gpu1",
            dict(assignment.split("=", 1) for k, v in service if k == "Environment" for assignment in shlex.split(v)),
        )
        assert parse(pipeline_argv(bare, VENV_PYTHON)).scheduler_address is None


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze on this machine")
def test_systemd_analyze_verify_accepts_the_units(tmp_path):
    # verify checks that ExecStart's program exists: this interpreter stands in for the venv's
    for unit in ("pipeline-scheduler.service", "pipeline-worker@.service"):
        text = (DEPLOY / "systemd" / unit).read_text()
        (tmp_path / unit).write_text(text.replace(VENV_PYTHON, sys.executable))
    out = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", "./pipeline-scheduler.service", "./pipeline-worker@gpu0.service"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    # a bad key or value is only a warning ("Unknown key ..., ignoring"): none may be printed
    assert not re.search(r"ignoring|unknown|failed", out.stdout + out.stderr, re.I), out.stdout + out.stderr


# -- Slurm (dask-jobqueue) ---------------------------------------------------------------------


@pytest.fixture
def slurm():
    saved = copy.deepcopy(dask.config.config)  # make_cluster sets the pipeline's Dask settings
    spec = importlib.util.spec_from_file_location("slurm_cluster", DEPLOY / "slurm" / "slurm_cluster.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    dask.config.config.clear()
    dask.config.config.update(saved)


def write_config(folder: Path, shards="list", security: dict | None = None) -> str:
    data = {
        "shards": [{"name": f"gpu{i}", "kind": "gpu", "devices": [0]} for i in range(3)]
        if shards == "list"
        else shards,
        "engine": {"kind": "fake"},
        "advanced": {"intake": {"concurrent_batches": 3}},
    }
    if security:
        data["security"] = security
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def job_command(script: str) -> list[str]:
    lines = [line for line in script.splitlines() if " -m pipeline worker " in line]
    assert len(lines) == 1, script
    return shlex.split(lines[0])


def check_job_script(script: str, config_path: str, address: str):
    """The job asks one GPU and runs ``pipeline worker --shard auto`` with jobqueue's options passed
    through to dask worker; returns the parsed command line."""
    assert "#SBATCH --gres=gpu:1" in script.splitlines()
    assert "#SBATCH --cpus-per-task=8" in script and "#SBATCH --mem=60G" in script  # the 64GB default
    args = parse(pipeline_argv(job_command(script), sys.executable))
    assert (args.command, args.scheduler_address, args.shard) == ("worker", address, "auto")
    assert (args.config, args.log_file, args.host) == (config_path, "-", "$(hostname)")
    rest = args.dask_args
    for option in ("--name", "--nthreads", "--memory-limit", "--death-timeout"):
        assert option in rest, rest
    assert rest[rest.index("--nthreads") + 1] == "3"  # the config's advanced.intake.concurrent_batches
    return args


@pytest.mark.parametrize("tls", [False, True], ids=["loopback", "tls"])
def test_slurm_cluster_renders_one_gpu_worker_jobs_for_the_pipelines_scheduler(slurm, tmp_path, tls):
    config_path = write_config(tmp_path, security=write_certs(tmp_path) if tls else None)
    cluster = slurm.make_cluster(config_path, 0, host="127.0.0.1", port=0, dashboard_address="127.0.0.1:0")
    try:
        assert not cluster.workers  # nothing submitted (n_gpus=0): no Slurm needed
        address = cluster.scheduler_address
        assert address.startswith("tls://127.0.0.1:" if tls else "tcp://127.0.0.1:")
        # the scheduler is the pipeline's: its preload's handlers, no work stealing
        assert "pipeline_claim_shard" in cluster.scheduler.handlers
        assert "stealing" not in cluster.scheduler.extensions
        args = check_job_script(cluster.job_script(), config_path, address)
        assert not args.insecure
        if tls:  # jobqueue's TLS options, passed through to dask worker
            assert {"--tls-ca-file", "--tls-cert", "--tls-key"} <= set(args.dask_args)
    finally:
        cluster.close()


def test_slurm_job_script_for_a_scheduler_started_elsewhere(slurm, tmp_path):
    config_path = write_config(tmp_path)
    script = slurm.worker_job_script(config_path, "tcp://10.0.0.1:8786", insecure=True)
    args = check_job_script(script, config_path, "tcp://10.0.0.1:8786")
    assert args.insecure
    assert args.dask_args[args.dask_args.index("--name") + 1] == "pipeline-${SLURM_JOB_ID}"  # one per job
    with pytest.raises(Exception, match="must start with tcp://"):  # the config has no security:
        slurm.worker_job_script(config_path, "tls://10.0.0.1:8786", insecure=True)


def test_slurm_cluster_refuses_an_open_scheduler_and_shards_auto(slurm, tmp_path):
    with pytest.raises(ValueError, match="without TLS"):
        slurm.make_cluster(write_config(tmp_path), 0, host="10.1.2.3")
    with pytest.raises(ValueError, match="list the shards"):
        slurm.make_cluster(write_config(tmp_path, shards="auto"), 0, host="127.0.0.1")
    with pytest.raises(ValueError, match="one shard per job"):
        slurm.make_cluster(write_config(tmp_path), 4, host="127.0.0.1")


# -- Kubernetes (the Dask operator) -------------------------------------------------------------

CRD = "operator/deployment/helm/dask-kubernetes-operator/crds/daskcluster.yaml"


def manifest() -> tuple[dict, dict]:
    docs = {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "kubernetes" / "daskcluster.yaml").read_text())}
    return docs["ConfigMap"], docs["DaskCluster"]


def closed(schema):
    """The CRD's schema with unknown fields refused (kubectl apply's strict field validation;
    an object with ``x-kubernetes-preserve-unknown-fields`` stays open). jsonschema ignores the
    other ``x-kubernetes-*`` keys."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        k: ({name: closed(s) for name, s in v.items()} if k == "properties" else closed(v)) for k, v in schema.items()
    }
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def crd_validator():
    import jsonschema

    crd = yaml.safe_load((files("dask_kubernetes") / CRD).read_text())
    version = next(v for v in crd["spec"]["versions"] if v["storage"])
    validator = jsonschema.Draft7Validator(closed(version["schema"]["openAPIV3Schema"]["properties"]["spec"]))
    return crd, version, validator


def test_daskcluster_matches_the_operators_crd(crd_validator):
    crd, version, validator = crd_validator
    _, cluster = manifest()
    assert cluster["apiVersion"] == f"{crd['spec']['group']}/{version['name']}"
    assert cluster["kind"] == crd["spec"]["names"]["kind"]
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(cluster["spec"])]
    assert not errors, errors
    # the check is not vacuous: a mistyped key, and a GPU count the schema's quantity (string) refuses
    broken = copy.deepcopy(cluster["spec"])
    broken["worker"]["spec"]["containers"][0]["comand"] = ["python"]
    broken["worker"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 1
    assert len(list(validator.iter_errors(broken))) == 2


def test_daskcluster_ports_and_service_are_the_operators(crd_validator):
    """The operator finds the scheduler by its Service's port names (tcp-comm, http-dashboard)."""
    from dask_kubernetes.operator import make_cluster_spec

    theirs = make_cluster_spec(name="pipeline", image="x")["spec"]["scheduler"]
    ours = manifest()[1]["spec"]["scheduler"]
    names = lambda ports: sorted((p["name"], p["containerPort"]) for p in ports)  # noqa: E731
    assert names(ours["spec"]["containers"][0]["ports"]) == names(theirs["spec"]["containers"][0]["ports"])
    assert ours["service"] == theirs["service"]


def pod_config(config_map: dict, container: dict, volumes: list[dict]):
    """The pipeline config a container reads: its --config path mounted from the ConfigMap."""
    from pipeline.config import parse_config

    words = container["command"]
    path = words[words.index("--config") + 1]
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == path)
    volume = next(v for v in volumes if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    config = parse_config(yaml.safe_load(config_map["data"][mount["subPath"]]))
    # the TLS files the config names are under the container's mount of the Secret
    secret_mounts = [
        m["mountPath"]
        for m in container["volumeMounts"]
        if "secret" in next(v for v in volumes if v["name"] == m["name"])
    ]
    for tls_file in (config.security.tls_ca_file, config.security.tls_cert, config.security.tls_key):
        assert any(tls_file.startswith(m + "/") for m in secret_mounts), tls_file
    return path, config


def test_daskcluster_worker_group_one_gpu_pod_per_shard(crd_validator):
    from dask_kubernetes.operator.controller.controller import build_worker_deployment_spec

    from pipeline.cluster.hosts import check_protocol, exposure_error

    config_map, cluster = manifest()
    worker = cluster["spec"]["worker"]
    # the pod as the operator makes it (it adds DASK_WORKER_NAME, keeps our DASK_SCHEDULER_ADDRESS)
    pod = build_worker_deployment_spec("pipeline-default", "ns", "pipeline", "0123456789", worker["spec"], {}, {})
    container = pod["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DASK_WORKER_NAME"] == "pipeline-default-worker-0123456789"
    path, config = pod_config(config_map, container, worker["spec"]["volumes"])
    assert env["DASK_SCHEDULER_ADDRESS"] == config.scheduler.address
    check_protocol(env["DASK_SCHEDULER_ADDRESS"], config)  # tls:// with the config's security:
    assert worker["replicas"] == len(config.shards)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert all(s.kind == "gpu" and s.devices == [0] for s in config.shards)  # each pod's one GPU
    env["POD_IP"] = "10.244.1.7"  # from the Downward API (status.podIP)
    words = [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env[m.group(1)], w) for w in container["command"]]
    args = parse(pipeline_argv(words, "python"))
    assert (args.command, args.shard, args.config, args.host, args.log_file) == (
        "worker",
        "auto",
        path,
        "10.244.1.7",
        "-",
    )
    assert args.scheduler_address is None and args.dask_args == ["--name", env["DASK_WORKER_NAME"]]
    assert exposure_error(args.host, config, args.insecure) is None


def test_daskcluster_scheduler_command(crd_validator):
    from pipeline.cluster.hosts import exposure_error

    config_map, cluster = manifest()
    pod = cluster["spec"]["scheduler"]["spec"]
    container = pod["containers"][0]
    path, config = pod_config(config_map, container, pod["volumes"])
    args = parse(pipeline_argv(container["command"], "python"))
    assert (args.command, args.config, args.host, args.port, args.log_file) == ("scheduler", path, "0.0.0.0", 8786, "-")
    assert args.dashboard_address == "0.0.0.0:8787"  # the probes' /health, on the pod's address
    assert not args.insecure and exposure_error(args.host, config, args.insecure) is None


def test_one_gpu_pods_config_passes_the_layout_check():
    """Shards on different hosts (pods, Slurm jobs) may each use their host's GPU 0; the layout
    check of ``run`` must not call that one GPU in two shards."""
    from pipeline.config import parse_config
    from pipeline.config.layout import check_layout

    config = parse_config(yaml.safe_load(manifest()[0]["data"]["cluster.yaml"]))
    assert check_layout(config, None, local=False) == []
