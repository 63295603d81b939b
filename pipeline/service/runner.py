"""Runs each batch as an ordinary file job in a thread of its own, with its output in the store. Cancelling a batch
or passing its ``expires_at`` lets the job go; its files then hold what the job committed and the requests left
unanswered. A restarted service resumes every batch that was not over. Records live in memory and are written to
the store at every change of state."""

from __future__ import annotations

import logging
import re
import threading
import time

from pipeline import console
from pipeline.data.errors import JobError
from pipeline.data.request_lines import first_bad_line
from pipeline.jobs.cluster_job import JobLeft
from pipeline.jobs.job import prepare_job
from pipeline.names import CHAT_URL, COMPLETIONS_URL, EMBEDDINGS_URL, RERANK_URL, RESPONSES_URL, SCORE_URL
from pipeline.service import result_files
from pipeline.service.errors import invalid, not_found
from pipeline.service.objects import FINAL, OUTPUT_PURPOSE, batch_record, new_batch_id, page, shown
from pipeline.service.store import Store

log = logging.getLogger("pipeline.service")

# What the cluster's engines must serve for each endpoint; scoring runs on a generation model.
ENDPOINT_TASKS = {
    CHAT_URL: "generate",
    COMPLETIONS_URL: "generate",
    RESPONSES_URL: "generate",
    EMBEDDINGS_URL: "embed",
    SCORE_URL: "generate",
    RERANK_URL: "generate",
}
WINDOW = re.compile(r"^([1-9][0-9]*)h$")


class Runner:
    """The service's batches; ``max_window_s`` caps every batch's ``completion_window``."""

    def __init__(self, pipeline, store: Store, part_rows: int = 10_000, max_window_s: int | None = None):
        self.pipeline, self.store, self.part_rows, self.max_window_s = pipeline, store, part_rows, max_window_s
        self._records: dict[str, dict] = {}
        self._stops: dict[str, threading.Event] = {}
        self._why: dict[str, str] = {}  # a batch whose job is let go: "cancelled" or "expired"
        self._threads: dict[str, threading.Thread] = {}
        self._timers: dict[str, threading.Timer] = {}
        self._lock = threading.Lock()
        self._closing = False  # set when the service stops

    def resume(self) -> list[str]:
        """Takes up the store's batches and starts again those that were not over; returns their ids."""
        resumed = []
        for record in self.store.batches():
            self._records[record["id"]] = record
            if record["status"] == "cancelling":  # the service stopped while it was cancelling
                self._why[record["id"]] = "cancelled"
                self._launch(record["id"])
            elif record["status"] not in FINAL:
                resumed.append(record["id"])
                self._launch(record["id"])
            elif record["status"] == "completed":  # the last service may have left its job's folder
                self.store.drop_job_output(record["id"])
        return resumed

    def create(self, input_file_id: str, endpoint: str, completion_window: str, metadata: dict | None) -> dict:
        """Creates a batch; the checks that need no reading of the file answer at once."""
        task = ENDPOINT_TASKS.get(endpoint)
        if task is None or task not in self.pipeline.engine_tasks:
            why = (
                f"Unsupported endpoint '{endpoint}'; this service runs {', '.join(ENDPOINT_TASKS)}."
                if task is None
                else f"The cluster's model ({self.pipeline.model}) does not serve {endpoint}."
            )
            raise invalid(why, param="endpoint", code="unsupported_endpoint")
        window = WINDOW.match(completion_window or "")
        if window is None:
            raise invalid(
                f"Invalid completion_window '{completion_window}'; give hours, e.g. '24h'.",
                param="completion_window",
                code="invalid_completion_window",
            )
        _check_metadata(metadata)
        file = self.store.file(input_file_id, param="input_file_id")
        if file["purpose"] != "batch":
            raise invalid(
                f"File {input_file_id} has purpose '{file['purpose']}'; a batch's input file must "
                f"have purpose 'batch'.",
                param="input_file_id",
                code="invalid_file_purpose",
            )
        window_s = int(window.group(1)) * 3600
        if self.max_window_s is not None:
            window_s = min(window_s, self.max_window_s)
        record = batch_record(
            new_batch_id(), input_file_id, endpoint, completion_window, window_s, metadata, file["_requests"]
        )
        with self._lock:
            self._records[record["id"]] = record
        self.store.save_batch(record)
        self._launch(record["id"])
        return shown(record)

    def get(self, batch_id: str) -> dict:
        with self._lock:
            record = self._records.get(batch_id)
            if record is None:
                raise not_found("batch", batch_id)
            return shown(record)

    def records(self) -> list[dict]:
        """Every batch's object as it is now, for ``/metrics``."""
        with self._lock:
            return [shown(r) for r in self._records.values()]

    def list_batches(self, after: str | None, limit: int) -> dict:
        if not 1 <= limit <= 100:
            raise invalid("limit must be between 1 and 100.", param="limit")
        with self._lock:
            ordered = sorted(self._records.values(), key=lambda r: r["_created_ns"], reverse=True)
            if after is not None:
                ids = [r["id"] for r in ordered]
                if after not in ids:
                    raise not_found("batch", after, param="after")
                ordered = ordered[ids.index(after) + 1 :]
            return page([shown(r) for r in ordered[:limit]], has_more=len(ordered) > limit)

    def cancel(self, batch_id: str) -> dict:
        record = self.get(batch_id)
        if record["status"] in FINAL:
            raise invalid(f"Cannot cancel a batch with status '{record['status']}'.", code="batch_not_cancellable")
        if record["status"] != "cancelling":
            with self._lock:
                self._why.setdefault(batch_id, "cancelled")  # an expiry already under way stays an expiry
            self._update(batch_id, status="cancelling", cancelling_at=int(time.time()))
            self._stops[batch_id].set()
        return self.get(batch_id)

    def expire(self, batch_id: str) -> None:
        """Lets the job go once ``expires_at`` has passed, unless the batch is over or finalizing its whole output."""
        with self._lock:
            record = self._records[batch_id]
            if self._closing or record["status"] in FINAL or record["status"] in ("finalizing", "cancelling"):
                return
            self._why.setdefault(batch_id, "expired")
        console.notify(f"batch {batch_id}: its completion window ({record['completion_window']}) is over; it expires")
        self._stops[batch_id].set()

    def running_on(self, file_id: str) -> list[str]:
        with self._lock:
            return [
                r["id"] for r in self._records.values() if r["input_file_id"] == file_id and r["status"] not in FINAL
            ]

    def close(self, timeout_s: float = 30.0) -> None:
        """Lets every job go when the service stops and leaves each batch for the next service to resume."""
        self._closing = True
        for timer in self._timers.values():
            timer.cancel()
        for stop in self._stops.values():
            stop.set()
        for t in list(self._threads.values()):
            t.join(timeout_s)

    def _launch(self, batch_id: str) -> None:
        """Starts the batch's job in a thread and times its expiry."""
        self._stops[batch_id] = stop = threading.Event()
        if batch_id in self._why:
            stop.set()
        timer = threading.Timer(max(0.0, self._records[batch_id]["expires_at"] - time.time()), self.expire, (batch_id,))
        timer.daemon = True
        self._timers[batch_id] = timer
        timer.start()
        t = threading.Thread(target=self._run, args=(batch_id,), name=f"batch-{batch_id}", daemon=True)
        self._threads[batch_id] = t
        t.start()

    def _run(self, batch_id: str) -> None:
        try:
            self._run_job(batch_id)
            if self.get(batch_id)["status"] in FINAL:
                self._timers[batch_id].cancel()
        except Exception as exc:  # noqa: BLE001 - the batch fails, the service goes on
            if self._closing:  # the client closed under the job; the next service resumes it
                return
            log.exception("batch %s failed", batch_id)
            self._fail(batch_id, "job_failed", f"{type(exc).__name__}: {exc}")

    def _run_job(self, batch_id: str) -> None:
        record = self.get(batch_id)
        output = self.store.job_output(batch_id)
        stop = self._stops[batch_id]
        # A job that wrote its output before the service stopped only needs its files made.
        if record["status"] != "finalizing" or not output.exists():
            file = self.store.file(record["input_file_id"])
            why = _invalid_file(file, record["endpoint"], self.store.content_path(file["id"]))
            if why:
                return self._fail(batch_id, *why)
            notes: list[str] = []
            try:
                job = prepare_job(
                    self.store.content_path(file["id"]),
                    output,
                    format="openai",
                    part_rows=self.part_rows,
                    config=self.pipeline.config,
                    notify=notes.append,
                )
            except JobError as exc:
                return self._fail(batch_id, "invalid_file", str(exc))
            for note in notes:
                console.notify(f"batch {batch_id}: {note}")
            if stop.is_set():
                return self._let_go(batch_id, job)
            if record["in_progress_at"] is None:
                self._update(batch_id, status="in_progress", in_progress_at=int(time.time()))
            try:
                job.run(
                    self.pipeline,
                    progress=False,
                    stop=stop,
                    title=f"batch {batch_id}",
                    on_progress=lambda done, failed, tokens: self._progress(batch_id, job, done, failed, tokens),
                )
            except JobLeft:
                return self._let_go(batch_id, job)
            if stop.is_set() and not self._closing:  # the job ended before it saw the stop
                console.notify(
                    f"batch {batch_id}: {self._why.get(batch_id, 'let go')} as its job ended; it completes "
                    f"with its whole output"
                )
            self._update(batch_id, status="finalizing", finalizing_at=int(time.time()))
        self._end(batch_id, "completed")

    def _progress(self, batch_id: str, job, done: int, failed: int, tokens: list[int]) -> None:
        """Updates the batch's request counts and usage while its job runs; fanned-out rows are counted as lines."""
        record = self.get(batch_id)
        usage = result_files.usage_of(*tokens) if any(tokens) else None
        if usage != record["usage"]:
            self._update(batch_id, usage=usage)
        counts = record["request_counts"]
        if job.steps.lines.fans_out:
            lines_done, failed = _pairs_as_lines(done, failed, counts["total"], job.rows_total)
            if lines_done is None:
                return
            done = lines_done
        now = {**counts, "completed": done - failed, "failed": failed}
        if now != counts:
            self._update(batch_id, request_counts=now)

    def _end(self, batch_id: str, status: str, job=None) -> None:
        """Ends the batch with ``status``, its output and error files made from the job's whole output, or, for a
        ``job`` that was let go, from what it committed, with the requests left unanswered as failed."""
        answered, failed = self.store.temporary(f"{batch_id}-output"), self.store.temporary(f"{batch_id}-errors")
        if job is None:
            ok, bad, usage = result_files.split(self.store.job_output(batch_id), answered, failed)
            total = max(self.get(batch_id)["request_counts"]["total"], ok + bad)
        else:
            ok, bad, usage = result_files.split_partial(job, answered, failed, status)
            total = ok + bad
        hexid = batch_id.removeprefix("batch_")
        fields = {}
        for name, path, count in (("output", answered, ok), ("error", failed, bad)):
            if count:
                file = self.store.add_written_file(
                    f"file-{name}-{hexid}", f"batch_{hexid}_{name}.jsonl", OUTPUT_PURPOSE, path
                )
                fields[f"{name}_file_id"] = file["id"]
            else:
                path.unlink(missing_ok=True)
        self._update(
            batch_id,
            status=status,
            **{f"{status}_at": int(time.time())},
            usage=usage,
            request_counts={"total": total, "completed": ok, "failed": bad},
            **fields,
        )
        self.store.drop_job_output(batch_id)

    def _fail(self, batch_id: str, code: str, message: str, line: int | None = None, param: str | None = None) -> None:
        self._update(
            batch_id,
            status="failed",
            failed_at=int(time.time()),
            errors={"object": "list", "data": [{"code": code, "message": message, "param": param, "line": line}]},
        )

    def _let_go(self, batch_id: str, job) -> None:
        why = self._why.get(batch_id)
        if why is not None:  # else the service stops; the next one resumes it
            self._end(batch_id, why, job)

    def _update(self, batch_id: str, **fields) -> None:
        with self._lock:  # so that the store never goes back to an older record
            record = {**self._records[batch_id], **fields}
            self._records[batch_id] = record
            self.store.save_batch(record)


def _invalid_file(file: dict, endpoint: str, path) -> tuple[str, str, int | None, str | None] | None:
    """Why a batch's input file fails validation, which fails the batch as OpenAI's does, or None."""
    if file["_requests"] == 0:
        return "empty_file", f"File {file['id']} holds no requests.", None, None
    with open(path, "rb") as f:
        bad = first_bad_line(f, endpoint, "the batch's endpoint")
    if bad is None:
        return None
    return bad.code, bad.message[0].upper() + bad.message[1:] + ".", bad.line, bad.param


def _pairs_as_lines(done: int, failed: int, lines: int, pairs: int | None) -> tuple[int | None, int]:
    """A fanned-out job's rows answered and failed as lines, in proportion and rounded down; None until its rows are
    known."""
    if not pairs:
        return None, 0
    lines_done = done * lines // pairs
    return lines_done, min(failed, lines_done)


def _check_metadata(metadata) -> None:
    if metadata is None:
        return
    ok = (
        isinstance(metadata, dict)
        and len(metadata) <= 16
        and all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512 for k, v in metadata.items()
        )
    )
    if not ok:
        raise invalid(
            "metadata must map at most 16 keys (strings of up to 64 characters) to strings of up to 512 characters.",
            param="metadata",
            code="invalid_metadata",
        )
