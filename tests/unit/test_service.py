"""`python -m pipeline serve` with the fake engine, as a user's program calls it: the official
`openai` package against the real service (a process of its own) on a resident cluster from
`python -m pipeline up`: upload, create, poll, download, compared with `python -m pipeline run`
on the same file; cancel mid-way; the service stopped, and killed, mid-way and started again; OpenAI's error
shapes over raw HTTP; the API key; the batches in /metrics and `python -m pipeline status`; expiry."""

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from openai import AsyncOpenAI, OpenAI
from openai.types import Completion
from prometheus_client.parser import text_string_to_metric_families

from pipeline import load_config

ROOT = Path(__file__).resolve().parents[2]
CHAT = "/v1/chat/completions"
MAX_FILE_BYTES = 2_000_000
MAX_REQUESTS = 5_000


def cli(env, *args, timeout=180):
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """``python -m pipeline serve`` in a process of its own, on a loopback port."""

    def __init__(self, env, config: Path, store: Path, log: Path, *extra):
        self.env, self.config, self.store, self.log, self.extra = env, config, store, log, extra
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc = None

    def start(self, timeout_s: float = 60.0) -> "Service":
        with open(self.log, "a") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pipeline",
                    "serve",
                    "--config",
                    self.config,
                    "--port",
                    str(self.port),
                    "--store",
                    self.store,
                    "--max-file-bytes",
                    str(MAX_FILE_BYTES),
                    "--max-requests",
                    str(MAX_REQUESTS),
                    "--part-rows",
                    "25",
                    *self.extra,
                ],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"{self.url}/batches", timeout=1).status_code in (200, 401):
                    return self
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"the service did not answer: {self.log.read_text()}"
            time.sleep(0.1)

    def stop(self, sig=signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)

    def client(self, api_key="unused") -> OpenAI:
        return OpenAI(base_url=self.url, api_key=api_key, max_retries=0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A resident cluster of fake engines (each request answered after 0.1 s, 8 at a time per
    engine, so a few thousand requests take seconds) and its config."""
    folder = tmp_path_factory.mktemp("service")
    env = {**os.environ, "PIPELINE_CLUSTER_DIR": str(folder / "cluster")}
    config = folder / "cluster.yaml"
    cfg = load_config().replace(
        scheduler={"dashboard_address": None},
        intake={"max_in_flight": 8},
        engine={"kind": "fake", "null_latency_s": 0.1},
    )
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    up = cli(env, "up", "--config", config)
    assert up.returncode == 0, up.stderr
    yield {"env": env, "config": config, "folder": folder}
    down = cli(env, "down", "--config", config)
    assert down.returncode == 0, down.stderr


@pytest.fixture(scope="module")
def service(cluster):
    svc = Service(cluster["env"], cluster["config"], cluster["folder"] / "store", cluster["folder"] / "serve.log")
    yield svc.start()
    svc.stop()


def requests_file(path: Path, n: int, bad: dict[int, str] | None = None) -> Path:
    """``n`` chat requests, a few documents each asked several questions; ``bad``: lines given as written."""
    with open(path, "w") as f:
        for i in range(n):
            if bad and i in bad:
                f.write(bad[i] + "\n")
                continue
            messages = [
                {"role": "system", "content": f"Document {i % 7}: " + "words " * 40},
                {"role": "user", "content": f"Question {i}?"},
            ]
            f.write(
                json.dumps(
                    {
                        "custom_id": f"req-{i}",
                        "method": "POST",
                        "url": CHAT,
                        "body": {"model": "any", "messages": messages, "max_completion_tokens": 8},
                    }
                )
                + "\n"
            )
    return path


def wait_for(client: OpenAI, batch_id: str, until, timeout_s: float = 120.0, seen: list | None = None):
    deadline = time.monotonic() + timeout_s
    while True:
        batch = client.batches.retrieve(batch_id)
        if seen is not None:
            seen.append(batch)
        if until(batch):
            return batch
        assert time.monotonic() < deadline, f"batch still {batch.status}: {batch}"
        time.sleep(0.1)


def over(batch) -> bool:
    return batch.status in ("completed", "failed", "cancelled", "expired")


def lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def without_created(line: dict) -> dict:
    """A response line without its body's ``created`` stamp (the job's start, which differs per run)."""
    line = json.loads(json.dumps(line))
    if line["response"]["body"] is not None:
        line["response"]["body"].pop("created", None)
    return line


def dropped(folder: Path, timeout_s: float = 10.0) -> None:
    """A batch's job folder is removed once its files are stored (just after its record is final)."""
    deadline = time.monotonic() + timeout_s
    while folder.exists():
        assert time.monotonic() < deadline, f"{folder}: the batch's job output was never dropped"
        time.sleep(0.1)


def pipeline_run(cluster, src: Path, out: Path) -> list[dict]:
    proc = cli(cluster["env"], "run", src, out, "--config", cluster["config"], "--quiet")
    assert proc.returncode == 0, proc.stderr
    return lines(out.read_text())


def test_upload_create_poll_download_equals_pipeline_run(service, cluster, tmp_path):
    bad = {
        5: "this line is not JSON",
        11: json.dumps(
            {
                "custom_id": "req-11",
                "method": "POST",
                "url": CHAT,
                "body": {"messages": [{"role": "user", "content": 3}]},
            }
        ),
    }
    src = requests_file(tmp_path / "requests.jsonl", 200, bad)
    client = service.client()

    uploaded = client.files.create(file=src.open("rb"), purpose="batch")
    assert uploaded.object == "file" and uploaded.purpose == "batch" and uploaded.bytes == src.stat().st_size
    assert uploaded.filename == "requests.jsonl"
    assert client.files.retrieve(uploaded.id).id == uploaded.id
    assert client.files.content(uploaded.id).read() == src.read_bytes()

    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h", metadata={"team": "tests"}
    )
    assert batch.status == "validating" and batch.request_counts.total == 200 and batch.metadata == {"team": "tests"}
    seen: list = []
    done = wait_for(client, batch.id, over, seen=seen)
    assert done.status == "completed", done
    # the counts moved while it ran
    running = [b.request_counts.completed for b in seen if b.status == "in_progress"]
    assert any(0 < c < 198 for c in running), running
    assert done.request_counts.total == 200 and done.request_counts.completed == 198 and done.request_counts.failed == 2
    assert done.created_at <= done.in_progress_at <= done.finalizing_at <= done.completed_at <= done.expires_at
    assert done.expires_at == done.created_at + 24 * 3600 and done.errors is None
    assert done.failed_at is None and done.cancelled_at is None and done.metadata == {"team": "tests"}

    output = lines(client.files.content(done.output_file_id).text)
    errors = lines(client.files.content(done.error_file_id).text)
    expected = pipeline_run(cluster, src, tmp_path / "run.jsonl")
    assert [without_created(o) for o in output] == [without_created(e) for e in expected if e["error"] is None]
    assert [o["custom_id"] for o in output] == [f"req-{i}" for i in range(200) if i not in bad]
    failed = [e for e in expected if e["error"] is not None]
    assert [e["custom_id"] for e in errors] == [f["custom_id"] for f in failed] == [None, "req-11"]
    for e, f in zip(errors, failed):  # OpenAI's error-file shape, the job's reason in it
        assert e["error"] is None and e["id"] == f["id"]
        assert e["response"]["status_code"] == 400 and e["response"]["request_id"] == f["response"]["request_id"]
        assert e["response"]["body"] == {
            "error": {"message": f["error"]["message"], "type": "invalid_request_error", "param": None, "code": "input"}
        }
    assert errors[1]["response"]["body"]["error"]["message"] == "input: messages[0].content is not text (got int)"
    # the Batch object's usage: the answered requests' tokens, summed (none while it validated,
    # the rows answered so far while it ran)
    usages = [o["response"]["body"]["usage"] for o in output]
    assert batch.usage is None and done.usage is not None
    live = [b.usage.input_tokens for b in seen if b.status == "in_progress" and b.request_counts.completed]
    assert live and all(0 < u <= done.usage.input_tokens for u in live), live
    assert done.usage.input_tokens == sum(u["prompt_tokens"] for u in usages) > 0
    assert done.usage.output_tokens == sum(u["completion_tokens"] for u in usages)
    assert done.usage.input_tokens_details.cached_tokens == sum(
        u["prompt_tokens_details"]["cached_tokens"] for u in usages
    )
    assert done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens

    files = {f.id: f for f in client.files.list().data}
    assert {uploaded.id, done.output_file_id, done.error_file_id} <= set(files)
    assert files[done.output_file_id].purpose == "batch_output"
    assert batch.id in [b.id for b in client.batches.list().data]
    dropped(cluster["folder"] / "store" / "batches" / batch.id)


def test_a_completions_batch_answers_each_line_as_a_text_completion(service, cluster, tmp_path):
    """A /v1/completions batch: each line's prompts (a list of four about one document, or one)
    answered as one ``text_completion`` line, as ``run`` writes it, counted a line each."""
    src = tmp_path / "completions.jsonl"
    with open(src, "w") as f:
        for i in range(30):
            doc = f"Document {i % 5}: " + "words " * 40
            prompt = [f"{doc}\n\nQ: question {k} on line {i}?\nA:" for k in range(4)] if i % 2 else f"{doc}\n\nQ: {i}?"
            f.write(
                json.dumps(
                    {
                        "custom_id": f"c-{i}",
                        "method": "POST",
                        "url": "/v1/completions",
                        "body": {"model": "any", "prompt": prompt, "max_tokens": 4},
                    }
                )
                + "\n"
            )
    client = service.client()
    uploaded = client.files.create(file=src.open("rb"), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="24h")
    done = wait_for(client, batch.id, over)
    assert done.status == "completed" and done.error_file_id is None, done
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (30, 30, 0)
    output = lines(client.files.content(done.output_file_id).text)
    assert [o["custom_id"] for o in output] == [f"c-{i}" for i in range(30)]
    bodies = [Completion.model_validate(o["response"]["body"]) for o in output]
    assert [len(b.choices) for b in bodies] == [4 if i % 2 else 1 for i in range(30)]
    assert done.usage.input_tokens == sum(b.usage.prompt_tokens for b in bodies) > 0
    expected = pipeline_run(cluster, src, tmp_path / "run.jsonl")
    assert [without_created(o) for o in output] == [without_created(e) for e in expected]


def test_async_client_upload_create_poll_download(service, tmp_path):
    """``openai.AsyncOpenAI`` as an asyncio program uses it: two batches at once, each uploaded,
    created, polled and downloaded."""

    async def one(client: AsyncOpenAI, n: int) -> tuple:
        src = requests_file(tmp_path / f"async-{n}.jsonl", n)
        uploaded = await client.files.create(file=src.open("rb"), purpose="batch")
        batch = await client.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h")
        deadline = time.monotonic() + 120
        while batch.status not in ("completed", "failed", "cancelled", "expired"):
            assert time.monotonic() < deadline, batch
            await asyncio.sleep(0.1)
            batch = await client.batches.retrieve(batch.id)
        output = await client.files.content(batch.output_file_id)
        return batch, lines(output.text)

    async def both() -> list:
        async with AsyncOpenAI(base_url=service.url, api_key="unused", max_retries=0) as client:
            return await asyncio.gather(one(client, 40), one(client, 70))

    for (batch, output), n in zip(asyncio.run(both()), (40, 70)):
        assert batch.status == "completed" and batch.request_counts.completed == n and batch.error_file_id is None
        assert [o["custom_id"] for o in output] == [f"req-{i}" for i in range(n)]
        assert all(o["response"]["status_code"] == 200 for o in output)


def test_batches_list_pages_with_after_and_limit(service, tmp_path):
    client = service.client()
    uploaded = client.files.create(file=requests_file(tmp_path / "small.jsonl", 3).open("rb"), purpose="batch")
    ids = [
        client.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h").id for _ in range(3)
    ]
    for batch_id in ids:
        assert wait_for(client, batch_id, over).status == "completed"
    first = client.batches.list(limit=2)
    assert [b.id for b in first.data] == ids[::-1][:2] and first.has_more
    second = client.batches.list(limit=2, after=first.data[-1].id)
    assert second.data[0].id == ids[0]
    # the SDK's auto-paging walks every page
    assert ids[::-1] == [b.id for b in client.batches.list(limit=1)][:3]


def test_cancel_mid_way_stops_the_job_and_the_cluster_serves_the_next_batch(service, cluster, tmp_path):
    client = service.client()
    big = client.files.create(file=requests_file(tmp_path / "big.jsonl", 3000).open("rb"), purpose="batch")
    batch = client.batches.create(input_file_id=big.id, endpoint=CHAT, completion_window="24h")
    wait_for(client, batch.id, lambda b: b.request_counts.completed >= 300)
    in_use = httpx.delete(f"{service.url}/files/{big.id}")
    assert in_use.status_code == 400 and in_use.json()["error"]["code"] == "file_in_use"
    counted = client.batches.retrieve(batch.id).request_counts.completed
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    cancelled = wait_for(client, batch.id, over, timeout_s=30)
    assert cancelled.status == "cancelled" and cancelled.cancelled_at >= cancelled.cancelling_at
    # every answer counted as completed before the cancel is kept (committed before the batch is cancelled)
    assert cancelled.request_counts.completed >= counted >= 300
    # its output file holds the answers its job committed, its error file each request left unanswered
    kept_and_unanswered(
        client, cancelled, 3000, "batch_cancelled", "This request could not be executed before the batch was cancelled."
    )
    # a cancelled batch is over: cancelling it again is an error
    again = httpx.post(f"{service.url}/batches/{batch.id}/cancel")
    assert again.status_code == 400 and "cancelled" in again.json()["error"]["message"]
    # the job stopped on the cluster: its requests were aborted, none waits (it does not answer the rest for nobody)
    deadline = time.monotonic() + 10
    while True:
        shards = json.loads(cli(cluster["env"], "status", "--json", "--config", cluster["config"]).stdout)["shards"]
        if all(s["metrics"]["in_flight"] == 0 and s["metrics"]["queued"] == 0 for s in shards.values()):
            break
        assert time.monotonic() < deadline, shards
        time.sleep(0.2)
    # and the cluster serves the next batch
    small = client.files.create(file=requests_file(tmp_path / "small.jsonl", 20).open("rb"), purpose="batch")
    after = client.batches.create(input_file_id=small.id, endpoint=CHAT, completion_window="24h")
    assert wait_for(client, after.id, over).request_counts.completed == 20


EXPIRED = "This request could not be executed before the completion window expired."


def kept_and_unanswered(client: OpenAI, batch, n: int, code: str, message: str) -> None:
    """A batch of ``n`` requests (``requests_file``, none bad) let go midway: its output file
    holds the answered requests (numbered as a whole run numbers them), its error file every
    other request with OpenAI's ``code`` and ``message``; the counts say as much."""
    counts = batch.request_counts
    assert counts.total == n and 0 < counts.completed < n and counts.completed + counts.failed == n, counts
    output = lines(client.files.content(batch.output_file_id).text)
    errors = lines(client.files.content(batch.error_file_id).text)
    assert len(output) == counts.completed and len(errors) == counts.failed
    for line in output:
        assert line["id"] == "pipeline-" + line["custom_id"].removeprefix("req-") and line["error"] is None
        assert line["response"]["status_code"] == 200 and line["response"]["body"]["object"] == "chat.completion"
    for line in errors:
        assert line["id"] == "pipeline-" + line["custom_id"].removeprefix("req-")
        assert line["response"] is None and line["error"] == {"code": code, "message": message}
    order = [int(line["custom_id"].removeprefix("req-")) for line in output]
    assert order == sorted(order)
    assert sorted(order + [int(e["custom_id"].removeprefix("req-")) for e in errors]) == list(range(n))


def test_a_batch_past_its_window_expires_keeping_its_answers_also_across_a_restart(cluster, tmp_path):
    """``--max-window-s 8``: a batch too big for 8 s expires at its ``expires_at``, its job let go
    on the cluster, its committed answers in its output file, the rest in its error file
    (``batch_expired``); a batch whose window ends while no service runs expires as the next
    service starts."""
    svc = Service(
        cluster["env"], cluster["config"], tmp_path / "store", tmp_path / "serve.log", "--max-window-s", "8"
    ).start()
    try:
        client = svc.client()
        big = client.files.create(file=requests_file(tmp_path / "big.jsonl", 3000).open("rb"), purpose="batch")
        batch = client.batches.create(input_file_id=big.id, endpoint=CHAT, completion_window="1h")
        assert batch.completion_window == "1h" and batch.expires_at == batch.created_at + 8
        expired = wait_for(client, batch.id, over, timeout_s=60)
        assert expired.status == "expired" and expired.expired_at >= expired.expires_at, expired
        assert expired.completed_at is None and expired.cancelled_at is None and expired.failed_at is None
        kept_and_unanswered(client, expired, 3000, "batch_expired", EXPIRED)
        dropped(tmp_path / "store" / "batches" / batch.id)

        later = client.batches.create(input_file_id=big.id, endpoint=CHAT, completion_window="24h")
        wait_for(client, later.id, lambda b: b.request_counts.completed >= 200)
        svc.stop()
        assert json.loads((tmp_path / "store" / "batches" / f"{later.id}.json").read_text())["status"] == "in_progress"
        time.sleep(max(0.0, later.expires_at + 1 - time.time()))
        svc.start()
        again = wait_for(svc.client(), later.id, over, timeout_s=60)
        assert again.status == "expired" and again.expired_at > again.expires_at, again
        kept_and_unanswered(svc.client(), again, 3000, "batch_expired", EXPIRED)
    finally:
        svc.stop()
    assert f"batch {batch.id}: its completion window (1h) is over; it expires" in (tmp_path / "serve.log").read_text()


def test_service_stopped_then_killed_mid_batch_resumes_from_committed_answers(cluster, tmp_path):
    """Stopped (SIGTERM: exit 0, the batch left in progress for the next service) and killed
    (SIGKILL) mid-batch: each service started again resumes it from its committed answers; the
    output is what an uninterrupted run writes."""
    svc = Service(cluster["env"], cluster["config"], tmp_path / "store", tmp_path / "serve.log").start()
    record = tmp_path / "store" / "batches"

    def stop_once_committed(files: int, sig) -> None:
        deadline = time.monotonic() + 60
        while len(list(answers.glob("p*/*.parquet"))) < files:
            assert time.monotonic() < deadline, "no answers committed in time"
            time.sleep(0.05)
        svc.stop(sig)

    try:
        src = requests_file(tmp_path / "requests.jsonl", 600)
        client = svc.client()
        uploaded = client.files.create(file=src.open("rb"), purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h")
        answers = record / batch.id / "output.jsonl.partial" / "answers"
        stop_once_committed(2, signal.SIGTERM)
        assert svc.proc.returncode == 0
        assert json.loads((record / f"{batch.id}.json").read_text())["status"] == "in_progress"
        svc.start()
        stop_once_committed(len(list(answers.glob("p*/*.parquet"))) + 2, signal.SIGKILL)
        svc.start()
        done = wait_for(svc.client(), batch.id, over)
        output = lines(svc.client().files.content(done.output_file_id).text)
    finally:
        svc.stop()
    log = (tmp_path / "serve.log").read_text()
    assert log.count(f"resuming 1 batch(es): {batch.id}") == 2
    resumed = [int(part.split(" ")[0]) for part in log.split("resuming: ")[1:]]
    assert len(resumed) == 2 and 0 < resumed[0] < resumed[1] < 600, log
    assert done.status == "completed" and done.request_counts.completed == 600 and done.error_file_id is None
    expected = pipeline_run(cluster, src, tmp_path / "run.jsonl")
    assert [without_created(o) for o in output] == [without_created(e) for e in expected]


def scrape(port: int, **headers) -> dict:
    """The service's /metrics: each sample's value by (name, labels)."""
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", headers=headers)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain"), response.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def test_batches_in_metrics_and_in_pipeline_status(service, cluster, tmp_path):
    client = service.client()
    uploaded = client.files.create(file=requests_file(tmp_path / "r.jsonl", 600).open("rb"), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h")
    ours = (("batch_id", batch.id),)
    running = wait_for(client, batch.id, lambda b: b.status == "in_progress" and b.request_counts.completed > 0)
    seen = scrape(service.port)
    assert seen[("pipeline_service_batch_info", (*ours, ("endpoint", CHAT), ("status", "in_progress")))] == 1
    assert seen[("pipeline_service_batch_requests", ours)] == 600
    assert running.request_counts.completed <= seen[("pipeline_service_batch_requests_completed", ours)] < 600
    assert seen[("pipeline_service_batches", (("status", "in_progress"),))] >= 1

    done = wait_for(client, batch.id, over)
    assert done.status == "completed"
    seen = scrape(service.port)
    assert seen[("pipeline_service_batch_requests_completed", ours)] == 600
    assert seen[("pipeline_service_batch_requests_failed", ours)] == 0
    assert seen[("pipeline_service_batch_created_seconds", ours)] == done.created_at
    assert ("pipeline_service_batch_info", (*ours, ("endpoint", CHAT), ("status", "in_progress"))) not in seen
    statuses = [b.status for b in client.batches.list(limit=100)]
    for state in ("completed", "cancelled", "in_progress", "expired"):
        assert seen[("pipeline_service_batches", (("status", state),))] == statuses.count(state)

    # python -m pipeline status lists the store's batches, newest first, beside the cluster's shards
    store = cluster["folder"] / "store"
    shown = cli(cluster["env"], "status", "--config", cluster["config"], "--store", store)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert f"batches in {store} (python -m pipeline serve):" in text and "shard" in text
    line = next(row for row in text.splitlines() if row.startswith(batch.id))
    assert line.split()[1:5] == ["completed", "600", "0", "600"], line
    listed = [row.split()[0] for row in text.split("(python -m pipeline serve):\n")[1].splitlines()[1:]]
    assert listed == [b.id for b in client.batches.list(limit=20)]
    as_json = json.loads(
        cli(cluster["env"], "status", "--json", "--config", cluster["config"], "--store", store).stdout
    )
    assert {"shards", "batches"} <= set(as_json)
    assert next(b for b in as_json["batches"] if b["id"] == batch.id)["request_counts"] == {
        "total": 600,
        "completed": 600,
        "failed": 0,
    }
    # a store with no batches: no list
    empty = cli(cluster["env"], "status", "--config", cluster["config"], "--store", tmp_path / "none")
    assert empty.returncode == 0 and "batches in" not in empty.stdout


def test_openai_shaped_errors(service, tmp_path):
    def error_of(response, status):
        assert response.status_code == status, response.text
        body = response.json()
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
        return body["error"]

    url = service.url
    e = error_of(httpx.get(f"{url}/files/file-nope"), 404)
    assert e["code"] == "file_not_found" and "file-nope" in e["message"]
    assert error_of(httpx.get(f"{url}/batches/batch_nope"), 404)["code"] == "batch_not_found"
    assert error_of(httpx.get(f"{url}/nothing-here"), 404)["type"] == "invalid_request_error"
    # any id the service does not know is 404, whatever it holds (a name too long for the file
    # system answered 500)
    for odd in ("x" * 5000, "file-" + "a" * 300, "..", "%2e%2e", "file-%00", "a%2Fb", " "):
        for route in (f"files/{odd}", f"files/{odd}/content", f"batches/{odd}"):
            assert error_of(httpx.get(f"{url}/{route}"), 404)["type"] == "invalid_request_error", route
        assert error_of(httpx.delete(f"{url}/files/{odd}"), 404)
        assert error_of(httpx.post(f"{url}/batches/{odd}/cancel"), 404)
    e = error_of(
        httpx.post(f"{url}/batches", json={"input_file_id": "file-nope", "endpoint": CHAT, "completion_window": "24h"}),
        404,
    )
    assert e["param"] == "input_file_id"
    e = error_of(httpx.post(f"{url}/batches", json={"input_file_id": "file-nope", "completion_window": "24h"}), 400)
    assert e["param"] == "endpoint" and e["type"] == "invalid_request_error"

    client = service.client()
    src = requests_file(tmp_path / "r.jsonl", 2)
    notes = client.files.create(file=src.open("rb"), purpose="user_data")
    e = error_of(
        httpx.post(f"{url}/batches", json={"input_file_id": notes.id, "endpoint": CHAT, "completion_window": "24h"}),
        400,
    )
    assert e["param"] == "input_file_id" and e["code"] == "invalid_file_purpose"
    batch_file = client.files.create(file=src.open("rb"), purpose="batch")
    e = error_of(
        httpx.post(
            f"{url}/batches",
            json={"input_file_id": batch_file.id, "endpoint": "/v1/moderations", "completion_window": "24h"},
        ),
        400,
    )
    assert e["param"] == "endpoint" and e["code"] == "unsupported_endpoint"
    e = error_of(
        httpx.post(f"{url}/files", files={"file": ("r.jsonl", src.read_bytes())}, data={"purpose": "nonsense"}), 400
    )
    assert e["param"] == "purpose"

    # over the limits: bytes, then requests
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"{}\n" * (MAX_FILE_BYTES // 3 + 1))
    e = error_of(
        httpx.post(f"{url}/files", files={"file": ("too-big.jsonl", big.read_bytes())}, data={"purpose": "batch"}), 400
    )
    assert e["code"] == "file_too_large" and e["param"] == "file"
    many = tmp_path / "many.jsonl"
    many.write_bytes(b"{}\n" * (MAX_REQUESTS + 1))
    e = error_of(
        httpx.post(f"{url}/files", files={"file": ("too-many.jsonl", many.read_bytes())}, data={"purpose": "batch"}),
        400,
    )
    assert e["code"] == "too_many_requests" and str(MAX_REQUESTS) in e["message"]
    assert not [f for f in client.files.list().data if f.filename in ("too-big.jsonl", "too-many.jsonl")]

    # a file whose requests are for another endpoint fails validation, with the batch's errors
    other = tmp_path / "other.jsonl"
    other.write_text(
        json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {"input": "text"}}) + "\n"
    )
    wrong = client.files.create(file=other.open("rb"), purpose="batch")
    batch = client.batches.create(input_file_id=wrong.id, endpoint=CHAT, completion_window="24h")
    failed = wait_for(client, batch.id, over)
    assert failed.status == "failed" and failed.failed_at is not None and failed.output_file_id is None
    assert [(d.code, d.line) for d in failed.errors.data] == [("mismatched_endpoint", 1)]
    # as does a line without a custom_id, or with another endpoint's url, wherever it is
    no_id = b'{"method": "POST", "url": "/v1/chat/completions", "body": {}}'
    for bad, code, param in (
        (no_id, "missing_required_parameter", "custom_id"),
        (
            json.dumps(
                {"custom_id": "x", "method": "POST", "url": "/v1/embeddings", "body": {"input": "text"}}
            ).encode(),
            "mismatched_endpoint",
            "url",
        ),
    ):
        mixed = tmp_path / f"{code}.jsonl"
        mixed.write_bytes(src.read_bytes() + b"\n" + bad + b"\n")
        batch = client.batches.create(
            input_file_id=client.files.create(file=mixed.open("rb"), purpose="batch").id,
            endpoint=CHAT,
            completion_window="24h",
        )
        failed = wait_for(client, batch.id, over)
        assert failed.status == "failed" and failed.output_file_id is None and failed.request_counts.completed == 0
        (error,) = failed.errors.data
        assert (error.code, error.line, error.param) == (code, 3, param) and error.message.startswith("Line 3: ")

    # custom_ids used twice fail validation too
    twice = tmp_path / "twice.jsonl"
    twice.write_text(src.read_text().replace('"req-1"', '"req-0"'))
    batch = client.batches.create(
        input_file_id=client.files.create(file=twice.open("rb"), purpose="batch").id,
        endpoint=CHAT,
        completion_window="24h",
    )
    failed = wait_for(client, batch.id, over)
    assert failed.status == "failed" and failed.errors.data[0].code == "invalid_file"
    assert "'req-0' (2 times)" in failed.errors.data[0].message

    # deleting a file
    deleted = client.files.delete(notes.id)
    assert deleted.deleted and deleted.id == notes.id
    assert error_of(httpx.get(f"{url}/files/{notes.id}/content"), 404)["code"] == "file_not_found"


def test_api_key_is_required_when_set_and_beyond_loopback(cluster, tmp_path):
    refused = cli(
        cluster["env"],
        "serve",
        "--config",
        cluster["config"],
        "--host",
        "0.0.0.0",
        "--port",
        str(free_port()),
        "--store",
        tmp_path / "store0",
        timeout=60,
    )
    assert refused.returncode == 2 and "needs an API key" in refused.stderr
    svc = Service(
        cluster["env"], cluster["config"], tmp_path / "store", tmp_path / "serve.log", "--api-key", "s3cret"
    ).start()
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            r = httpx.get(f"{svc.url}/files", headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert svc.client(api_key="s3cret").files.list().data == []
        assert httpx.get(f"http://127.0.0.1:{svc.port}/metrics").status_code == 401
        assert (
            scrape(svc.port, Authorization="Bearer s3cret")[("pipeline_service_batches", (("status", "completed"),))]
            == 0
        )
    finally:
        svc.stop()


def test_the_docs_example_works_as_written(service, tmp_path):
    """docs/service.md's Python example, run as a user would (only the port is this test's)."""
    text = (ROOT / "docs" / "service.md").read_text()
    example = text.split("```python\n")[1].split("```")[0]
    assert 'base_url="http://127.0.0.1:8000/v1"' in example
    script = tmp_path / "example.py"
    script.write_text(example.replace("127.0.0.1:8000", f"127.0.0.1:{service.port}"))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    printed = proc.stdout.splitlines()
    assert printed[-2:] == ["q0 ", "q1 "]  # (the fake engine's answers are empty)
    assert any(line.startswith("completed ") for line in printed)
