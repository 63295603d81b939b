"""The batch service against ``python -m pipeline run`` on one warm cluster.

    .venv/bin/python scripts/service_bench.py [--requests 10000] [--rounds 3]
    .venv/bin/python scripts/service_bench.py --engine vllm --requests 500 --rounds 1

Starts a resident cluster (``python -m pipeline up``, in a folder of its own) and the service on it
(``python -m pipeline serve`` on 127.0.0.1). ``--engine fake`` (the default): fake engines with
``engine.null_latency_s: 0``, what is measured is the path around the engine; requests of a
~45-token system message over 50 documents, 8 new tokens. ``--engine vllm``: the configured real
engines; requests of retrieval-sized documents (~750 tokens, the bench's reuse shape: 4 questions
a document, interleaved) as the system message and the question as the user's, 32 new tokens at
most. Then, on that one cluster:

1. a warm-up batch through the API (1,000 requests; 16 on real engines), then the service's RSS;
   (on real engines the prefix caches are emptied before each contender, so each starts cold; and
   each round's two go in turn first)
2. ``--rounds`` times: a ``--requests`` chat-completions batch through the API (upload, create,
   poll every ``--poll-s`` (20 ms), download the output file) and the same JSONL through ``python -m pipeline
   run`` (a process of its own, as a user runs it), each timed end to end: rows/s each, their
   ratio; every poll's latency (``GET /v1/batches/{id}`` over one keep-alive connection);
3. the service's RSS after the first big batch and after the last.

Prints the figures; stops the service and the cluster at the end. Nothing leaves loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from pipeline import load_config  # noqa: E402

CHAT = "/v1/chat/completions"


def requests_file(path: Path, n: int, real: bool, seed: int = 0) -> Path:
    if real:
        from pipeline.bench.workloads import document_questions

        rows = document_questions(max(1, n // 4), 4, seed=seed, order="interleaved")[:n]
        chats = [
            ([{"role": "system", "content": r["document"]}, {"role": "user", "content": r["question"]}], 32)
            for r in rows
        ]
    else:
        chats = [
            (
                [
                    {"role": "system", "content": f"Document {i % 50}: " + "words " * 40},
                    {"role": "user", "content": f"Question {i}?"},
                ],
                8,
            )
            for i in range(n)
        ]
    with open(path, "w") as f:
        for i, (messages, tokens) in enumerate(chats):
            f.write(
                json.dumps(
                    {
                        "custom_id": f"req-{i}",
                        "method": "POST",
                        "url": CHAT,
                        "body": {"model": "any", "messages": messages, "max_completion_tokens": tokens},
                    }
                )
                + "\n"
            )
    return path


def cli(env, *args, timeout=600) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise SystemExit(f"python -m pipeline {' '.join(map(str, args))} failed:\n{proc.stderr}")
    return proc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api_batch(http: httpx.Client, src: Path, polls: list[float] | None = None, poll_s: float = 0.02) -> float:
    """Upload, create, poll every ``poll_s`` until over, download: seconds end to end."""
    t0 = time.perf_counter()
    with open(src, "rb") as f:
        uploaded = http.post("/files", files={"file": (src.name, f)}, data={"purpose": "batch"}).json()
    batch = http.post(
        "/batches", json={"input_file_id": uploaded["id"], "endpoint": CHAT, "completion_window": "24h"}
    ).json()
    while batch["status"] not in ("completed", "failed", "cancelled", "expired"):
        time.sleep(poll_s)
        p0 = time.perf_counter()
        response = http.get(f"/batches/{batch['id']}")
        if polls is not None and batch["status"] == "in_progress":
            polls.append(time.perf_counter() - p0)
        batch = response.json()
    if batch["status"] != "completed":
        raise SystemExit(f"batch {batch['id']} ended {batch['status']}: {batch}")
    output = http.get(f"/files/{batch['output_file_id']}/content").content
    seconds = time.perf_counter() - t0
    assert output.count(b"\n") == batch["request_counts"]["completed"] == batch["request_counts"]["total"]
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--engine", choices=("fake", "vllm"), default="fake")
    ap.add_argument(
        "--poll-s",
        type=float,
        default=0.02,
        help="seconds between polls of the running batch (each poll's latency is recorded)",
    )
    args = ap.parse_args()
    real = args.engine == "vllm"
    folder = Path(tempfile.mkdtemp(prefix="service-bench-"))
    env = {**os.environ, "PIPELINE_CLUSTER_DIR": str(folder / "cluster")}
    config = folder / "cluster.yaml"
    cfg = load_config().replace(scheduler={"dashboard_address": None})
    if not real:
        cfg = cfg.replace(engine={"kind": "fake", "null_latency_s": 0.0})
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    small = requests_file(folder / "small.jsonl", 16 if real else 1_000, real, seed=1)
    big = requests_file(folder / "big.jsonl", args.requests, real)
    engines = "real vLLM engines" if real else "fake engines (null_latency_s 0)"
    print(
        f"cluster: {len(cfg.shards)} shards of {engines}, {os.cpu_count()} CPUs; "
        f"{args.requests} requests a batch, {args.rounds} round(s)",
        flush=True,
    )
    t0 = time.perf_counter()
    cli(env, "up", "--config", config)

    def empty_caches():
        return None

    if real:  # each contender starts with empty prefix caches: what one left would help the other
        from distributed import Client

        from pipeline.cluster.resident_state import ClusterState
        from pipeline.worker.queries import reset_worker

        dask = Client(ClusterState.load(folder / "cluster").address)

        def empty_caches():
            return dask.run(reset_worker)

    port = free_port()
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline",
            "serve",
            "--config",
            config,
            "--port",
            str(port),
            "--store",
            folder / "store",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(folder / "serve.log", "w"),
    )
    try:
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}/v1", timeout=60)
        while True:
            try:
                http.get("/batches")
                break
            except httpx.TransportError:
                if serve.poll() is not None or time.perf_counter() - t0 > 120:
                    raise SystemExit(f"the service did not start: {(folder / 'serve.log').read_text()}")
                time.sleep(0.1)
        service = psutil.Process(serve.pid)
        api_batch(http, small)
        rss_small = service.memory_info().rss
        api_s, run_s, rss_big, polls = [], [], [], []
        for r in range(args.rounds):
            # (in turn first: what one leaves in the engines' prefix caches helps the other)
            for who in ("api", "run") if r % 2 == 0 else ("run", "api"):
                empty_caches()
                if who == "api":
                    api_s.append(api_batch(http, big, polls, args.poll_s))
                    rss_big.append(service.memory_info().rss)
                else:
                    t = time.perf_counter()
                    cli(env, "run", big, folder / f"run-{r}.jsonl", "--config", config, "--quiet")
                    run_s.append(time.perf_counter() - t)
            print(
                f"round {r + 1}: API {args.requests / api_s[-1]:.1f} rows/s ({api_s[-1]:.2f} s), "
                f"run {args.requests / run_s[-1]:.1f} rows/s ({run_s[-1]:.2f} s)",
                flush=True,
            )
    finally:
        serve.terminate()
        serve.wait(60)
        if real:
            dask.close()
        cli(env, "down", "--config", config)
    api_rate, run_rate = args.requests / statistics.median(api_s), args.requests / statistics.median(run_s)
    polls.sort()
    mb = 1 / 2**20
    print(
        f"\nthroughput ({args.requests} requests, median of {args.rounds}): API {api_rate:.1f} rows/s, "
        f"python -m pipeline run {run_rate:.1f} rows/s, ratio API/run {api_rate / run_rate:.3f} (target >= 0.97)"
    )
    print(
        f"GET /v1/batches/{{id}} while a batch runs ({len(polls)} polls): p50 {polls[len(polls) // 2] * 1e3:.2f} ms, "
        f"p99 {polls[min(len(polls) - 1, int(len(polls) * 0.99))] * 1e3:.2f} ms (target p99 <= 20 ms)"
    )
    print(
        f"service RSS: {rss_small * mb:.0f} MiB after the warm-up, "
        + ", ".join(f"{v * mb:.0f} MiB" for v in rss_big)
        + f" after each {args.requests}-request batch "
        f"(growth {(rss_big[-1] - rss_small) * mb:+.0f} MiB)"
    )
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
