"""Coordinates a job on the cluster from the client. The workers read, place, split, answer and write; this process
submits the tasks, shows progress and has the partitions merged in input order, so what it holds grows with
partitions and buckets, not rows. Dask reruns a lost worker's tasks. An answer task whose write failed for good
stops the job, and its other tasks are waited for, so that nothing is written after ``run`` ends."""

from __future__ import annotations

import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

import dask
import msgspec
from distributed import as_completed

from pipeline.data.errors import JobError
from pipeline.jobs.cluster_handle import ClusterHandle
from pipeline.jobs.job_plan import JobPlan
from pipeline.jobs.job_steps import JobSteps
from pipeline.jobs.let_go import Subscription, let_go
from pipeline.jobs.recovery import ShardWatch
from pipeline.names import VIEW_METADATA_KEY
from pipeline.steps.cluster_tasks import (
    JobSpec,
    Stopped,
)
from pipeline.summary import GONE, JobSummary
from tasks.registry import spec_or_generate, unserved

# A task's result that does not come within this long of its task ending was lost with its worker.
LOST_AFTER_S = 10.0


@dataclass
class _Reads:
    errors: int = 0  # rows that failed reading
    rows: int = 0
    done: int = 0  # reads that ended
    unreadable: dict[int, str] = field(default_factory=dict)  # partition -> why it could not be read


class JobLeft(Exception):
    """Raised when the job is let go before its end; its tasks are cancelled."""


def _cancelled(client, key: str) -> str:
    """The reason shown for a cancelled task; usually the client lost its scheduler, which cancels every task."""
    if client.status != "running":
        where = getattr(client.scheduler, "address", None) or "the cluster"
        return (
            f"the connection to the cluster's scheduler ({where}) was lost: the scheduler stopped or cannot be "
            f"reached; the answers committed so far are kept; once the cluster is back (a local one: "
            f"`python -m pipeline down`, then `up`), run the same command again to resume"
        )
    return (
        f"task {key} was cancelled by the cluster; the answers committed so far are kept; run the same command "
        f"again to resume"
    )


class ClusterJob:
    """Coordinates one job on the cluster; ``steps`` decides what its input and output are."""

    def __init__(self, steps: JobSteps, config, truncate: bool, part_rows: int = 10_000, flush_seconds: float = 30.0):
        self.steps, self.config, self.truncate = steps, config, truncate
        self.part_rows, self.flush_seconds = part_rows, flush_seconds  # how often answers are committed
        self.rows_total = steps.rows_total  # None until every partition is read
        self.on_progress = None
        self._tokens: dict[int, list[int]] = {}  # bucket -> the tokens its task reported so far

    @property
    def done(self) -> int:
        return self.steps.committed()

    def run(
        self,
        pipeline: ClusterHandle,
        progress: bool | None = None,
        watched: bool | None = None,
        stop: threading.Event | None = None,
        on_progress=None,
        title: str | None = None,
    ) -> JobSummary:
        """Runs the job. ``watched`` asks for the first answers early; setting ``stop`` cancels the tasks and raises
        ``JobLeft``. ``on_progress(done, failed, tokens)`` is called about once a second with the rows answered,
        resumed ones included, those that failed, and this run's prompt, cached and completion tokens."""
        self.on_progress = on_progress
        from tqdm import tqdm  # imported here to keep start-up fast

        if progress is None:
            progress = sys.stderr.isatty()
        if watched is None:
            watched = progress
        client = pipeline.client
        summary = JobSummary(resumed=self.steps.resumed, title=title)
        todo = self.steps.partitions()
        job_id = f"pipeline-job-{uuid.uuid4().hex[:12]}"
        summary.job = job_id
        spec = self._spec(pipeline, job_id, watched)
        answered: dict[int, int] = {}  # bucket -> rows its task answered so far
        t0 = time.perf_counter()
        subscription = Subscription(self._progress_taker(summary, answered, t0))
        client.subscribe_topic(spec.topic, subscription)
        futures: list = []
        try:
            with tqdm(
                total=self.rows_total,
                initial=self.steps.resumed,
                unit="row",
                desc="rows",
                disable=not progress,
                dynamic_ncols=True,
            ) as bar:
                # One Dask span named after the job lets the dashboard group its tasks.
                with dask.annotate(span={"name": (job_id,), "ids": (uuid.uuid4().hex,)}):
                    unreadable = self._run(pipeline, spec, todo, summary, answered, futures, bar, stop)
        finally:
            client.unsubscribe_topic(spec.topic)
            subscription.close()
            let_go(client, futures, job_id)
        summary.seconds = time.perf_counter() - t0
        summary.rows_read = summary.rows_total = summary.rows
        self._publish(pipeline, summary, force=True)
        if unreadable:
            raise JobError(unreadable[min(unreadable)])
        return summary

    def _progress_taker(self, summary: JobSummary, answered: dict[int, int], t0: float):
        """Handles the job's progress topic, where each answer task reports its rows and tokens so far."""
        self._tokens = {}

        def take_progress(event) -> None:
            _, msg = event
            answered[msg["bucket"]] = msg["rows"]
            self._tokens[msg["bucket"]] = msg.get("tokens") or [0, 0, 0]
            if summary.first_answer_s is None and msg["rows"]:
                summary.first_answer_s = time.perf_counter() - t0

        return take_progress

    def _spec(self, pipeline: ClusterHandle, job_id: str, watched: bool) -> JobSpec:
        """What every task of the job shares; raises ``JobError`` when the engines cannot serve the task."""
        task_name = self.steps.task_name(self.config)
        refused = unserved(task_name, pipeline.engine_tasks, pipeline.model)
        if refused:
            raise JobError(refused)
        sampling = self.config.sampling.as_sampling(self.config.engine.seed)
        if spec_or_generate(task_name).keeps_space:
            sampling = msgspec.structs.replace(sampling, strip=False)
        return self.steps.spec(
            job_id=job_id,
            run=uuid.uuid4().hex[:8],
            topic=f"{job_id}-progress",
            task=self.steps.task_kind(self.config, pipeline.tokenizer),
            sampling=sampling,
            truncate=self.truncate,
            commit_rows=self.part_rows,
            commit_s=self.flush_seconds,
            first_rows=self.config.intake.first_rows(watched),
            embedding_size=pipeline.embedding_size,
        )

    def _run(
        self,
        pipeline,
        spec: JobSpec,
        todo,
        summary: JobSummary,
        answered: dict,
        futures: list,
        bar,
        stop: threading.Event | None = None,
    ) -> dict[int, str]:
        """Runs the job's steps and returns the partitions that could not be read, with the reason."""
        client = pipeline.client
        if not todo:  # an earlier run merged every partition
            futures += self.steps.complete(client, spec, [], {}, {})
            return {}
        rec = self.config.recovery
        watch = ShardWatch(
            client, {s.name: s.resource for s in self.config.shards}, rec.poll_interval_s, rec.rejoin_timeout_s
        )
        shards = [s for s in self.config.shard_names if s in watch.workers]
        if not shards:
            raise JobError("no shard has a worker; nothing can answer the job")
        plan = JobPlan(client, spec, self.steps, self.config)
        plan.submit(todo, shards, futures)
        unreadable = self._watch(pipeline, spec, plan, watch, summary, answered, futures, bar, stop)
        bar.update(max(0, summary.resumed + summary.rows - bar.n))
        client.gather(plan.split_done)
        futures += self.steps.complete(client, spec, todo, unreadable, plan.answers)
        return unreadable

    def _watch(
        self,
        pipeline,
        spec: JobSpec,
        plan: JobPlan,
        watch: ShardWatch,
        summary: JobSummary,
        answered: dict,
        futures: list,
        bar,
        stop: threading.Event | None,
    ) -> dict[int, str]:
        """Takes each read's and answer's figures as they come, moves the buckets of a lost shard and shows progress."""
        client = pipeline.client
        reads = _Reads()
        pending = as_completed(list(plan.watched.values()) + plan.figures)
        moved_away: set[str] = set()  # answer tasks cancelled because their buckets moved
        while not pending.is_empty():
            if stop is not None and stop.is_set():
                raise JobLeft()
            for f in pending.next_batch(block=False) if pending.has_ready() else []:
                self._take(client, f, plan, pending, moved_away, summary, reads)
            if self.rows_total is None and reads.done == len(plan.figures):
                self.rows_total = bar.total = reads.rows + self.steps.rows_merged()
                if not reads.unreadable:
                    self.steps.rows_counted(self.rows_total)
            for event in watch.poll():
                summary.events.append(event)
                if event.kind == GONE:
                    plan.move(event.shard, watch, moved_away, pending, futures, summary)
            live = reads.errors + sum(answered.values())
            bar.update(max(0, summary.resumed + live - bar.n))
            self._publish(pipeline, summary, live)
            with pending.thread_condition:  # wake as soon as a task ends
                if not pending.has_ready() and not pending.is_empty():
                    pending.thread_condition.wait(timeout=0.5)
        return reads.unreadable

    def _take(
        self, client, f, plan: JobPlan, pending, moved_away: set[str], summary: JobSummary, reads: "_Reads"
    ) -> None:
        """Takes a finished read's or answer's figures; a result lost with its worker is watched again."""
        if f.cancelled():
            if f.key in moved_away:  # its bucket went to another shard
                return
            raise JobError(_cancelled(client, f.key))
        try:
            result = f.result(timeout=LOST_AFTER_S)
            if isinstance(result, Stopped):  # a write failed for good
                raise JobError(result.why)
            if f.key not in plan.partition_of and self.steps.answered is not None:
                self.steps.answered(client, plan.answers[plan.of_answer[f.key]])
        except TimeoutError:
            # The result was lost with its worker: Dask computes it again, or the bucket moves with its shard.
            pending.add(f)
            return
        summary.take(result)
        if f.key in plan.partition_of:
            reads.errors += result.errors
            reads.rows += result.read
            reads.done += 1
            if result.unreadable is not None:
                reads.unreadable[plan.partition_of[f.key].index] = result.unreadable
        else:
            plan.pieces[plan.of_answer[f.key]] = []  # its rows can be freed
        f.release()

    def _publish(self, pipeline, summary: JobSummary, live_rows: int = 0, force: bool = False) -> None:
        """Publishes the job's figures for the dashboard at most once a second; ``live_rows`` includes running
        buckets' rows."""
        now = time.monotonic()
        if not force and now - getattr(self, "_published", 0.0) < 1.0:
            return
        self._published = now
        summary.rows_total = self.rows_total - summary.resumed if self.rows_total is not None else None
        job = summary.as_dict()
        job["rows"] = max(summary.rows, live_rows)
        if self.on_progress is not None:
            tokens = [sum(t[k] for t in self._tokens.values()) for k in range(3)]
            self.on_progress(summary.resumed + job["rows"], summary.errors, tokens)
        if self.steps.shown is not None:  # a stream shows its window as part of itself
            job = self.steps.shown(job)
        pipeline.client.set_metadata(VIEW_METADATA_KEY, {"job": job, "time": time.time()})
