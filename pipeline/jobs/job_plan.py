"""Submits a cluster job's tasks: reads, placement on shards in buckets, per-shard pieces and one answer task per
bucket. ``move`` resubmits a lost shard's unfinished buckets on the live shards."""

from __future__ import annotations

import itertools
from dataclasses import replace

from pipeline.cluster.engines import held_documents
from pipeline.data.errors import JobError
from pipeline.jobs.job_steps import JobSteps
from pipeline.names import ANSWER_SLOTS_RESOURCE, READ_SLOTS_RESOURCE, shard_resource
from pipeline.steps.cluster_tasks import (
    JobSpec,
    buckets_of,
    documents_of,
    figures_of,
    figures_of_answer,
    piece_of,
    place_task,
)
from pipeline.steps.placement import Bucket
from pipeline.summary import JobSummary
from pipeline.token_estimate import CHARS_PER_TOKEN

# Jobs that share a cluster share it fairly. The short planning tasks go ahead of any answering, each job's k-th
# bucket on a shard has the same priority as every other job's so that a new job does not wait behind an earlier
# job's queue, and answer tasks leave each worker a thread for reads.
PLAN_PRIORITY = 100


def _slots_everywhere(client) -> set[str]:
    """The slot resources every shard's worker has; a task asking for one a worker lacks would never run."""
    workers = [w.get("resources", {}) for w in client.scheduler_info(n_workers=-1)["workers"].values()]
    shard_workers = [r for r in workers if any(k.startswith(shard_resource("")) for k in r)]
    return {
        name
        for name in (ANSWER_SLOTS_RESOURCE, READ_SLOTS_RESOURCE)
        if shard_workers and all(name in r for r in shard_workers)
    }


class JobPlan:
    """Submits a job's tasks and keeps the futures that the job's watch reads."""

    def __init__(self, client, spec: JobSpec, steps: JobSteps, config):
        self.client, self.spec, self.steps, self.config = client, spec, steps, config
        self.slots = _slots_everywhere(client)
        self.rank: dict[int, int] = {}  # a bucket's rank on its shard, its priority
        self.moves = itertools.count(1)  # numbers the moved answer tasks' keys
        self.figures: list = []  # each read's figures, in partition order
        self.partition_of: dict = {}  # a read's figures' key -> its partition
        self.bucket: dict[int, Bucket] = {}  # bucket index -> Bucket
        self.pieces: dict = {}  # bucket index -> its shard's pieces of every partition
        self.answers: dict = {}  # bucket index -> its answer task
        self.watched: dict = {}  # bucket index -> its answer's figures
        self.of_answer: dict = {}  # an answer's figures' key -> its bucket index
        self.split_done: list = []  # all must end before the merges

    def submit(self, todo: list, shards: list[str], futures: list) -> None:
        """Submits the reads, placement, splits and answer tasks for ``todo``, adding them to ``futures``."""
        client, spec, job = self.client, self.spec, self.spec.job_id
        slot = {"resources": {READ_SLOTS_RESOURCE: 1}} if READ_SLOTS_RESOURCE in self.slots else {}
        reads = [self.steps.read(client, spec, p, key=f"{job}-read-{p.index}", **slot) for p in todo]
        self.figures = [
            client.submit(figures_of, r, key=f"{job}-figures-{p.index}", priority=PLAN_PRIORITY)
            for r, p in zip(reads, todo)
        ]
        self.partition_of = {f.key: p for f, p in zip(self.figures, todo)}
        futures += self.figures
        place, buckets = self._place(reads, todo, shards, futures)
        splits = [
            self.steps.split(client, spec, r, place, p, key=f"{job}-split-{p.index}", **slot)
            for r, p in zip(reads, todo)
        ]
        # One piece per partition and shard, not per bucket: each answer task takes its slice of its shard's pieces.
        of_shard = {
            shard: [
                client.submit(piece_of, s, shard, key=f"{job}-piece-{p.index}-{shard}", priority=PLAN_PRIORITY)
                for s, p in zip(splits, todo)
            ]
            for shard in sorted({b.shard for b in buckets})
        }
        self.pieces = {b.index: of_shard[b.shard] for b in buckets}
        # A file job's split also commits the rows that failed reading, so every split must end before the merges.
        self.split_done = [
            client.submit(len, s, key=f"{job}-split-done-{p.index}", priority=PLAN_PRIORITY)
            for s, p in zip(splits, todo)
        ]
        futures += self.split_done
        # Letting go of the reads and splits lets Dask drop each once its dependents have run, so the workers hold a
        # partition's rows once. Pieces lost with a worker are computed again, and a reread gives the same rows.
        del of_shard, reads, splits
        per_shard: dict[str, int] = {}
        for b in buckets:
            self.rank[b.index] = per_shard.get(b.shard, 0)
            per_shard[b.shard] = self.rank[b.index] + 1
        self.bucket = {b.index: b for b in buckets}
        self.answers = {b.index: self.answer(b, self.pieces[b.index]) for b in buckets}
        self.watched = {i: self.figures_of(a) for i, a in self.answers.items()}
        self.of_answer = {f.key: i for i, f in self.watched.items()}
        futures += self.answers.values()
        futures += self.watched.values()

    def _place(self, reads: list, todo: list, shards: list[str], futures: list) -> tuple:
        """Submits the placement of the documents on ``shards`` and returns it with its buckets, once no id is used
        twice."""
        client, spec, job = self.client, self.spec, self.spec.job_id
        held = held_documents(client, shards)
        documents = [
            client.submit(documents_of, r, key=f"{job}-documents-{p.index}", priority=PLAN_PRIORITY)
            for r, p in zip(reads, todo)
        ]
        checks = self.steps.key_checks(client, spec)  # duplicate ids are refused before any answer
        futures += checks
        decode_bytes = CHARS_PER_TOKEN * self.config.sampling.max_tokens  # a byte per character
        place = client.submit(
            place_task,
            shards,
            held,
            self.config.jobs.bucket_rows,
            decode_bytes,
            *documents,
            max_loras=self.config.lora_slots,
            key=f"{job}-place",
            priority=PLAN_PRIORITY,
        )
        futures.append(place)
        buckets = client.submit(buckets_of, place, key=f"{job}-buckets", priority=PLAN_PRIORITY).result()
        if checks:
            self.steps.refuse_duplicates(client, spec, checks)
        return place, buckets

    def answer(self, b: Bucket, pieces: list, attempt: int = 0):
        key = f"{self.spec.job_id}-answer-{b.index}" + (f"-moved{attempt}" if attempt else "")
        resources = {self.config.shard(b.shard).resource: 1}
        if ANSWER_SLOTS_RESOURCE in self.slots:
            resources[ANSWER_SLOTS_RESOURCE] = 1
        return self.client.submit(
            self.steps.answer,
            self.spec,
            b,
            *pieces,
            task_key=key,
            key=key,
            resources=resources,
            priority=-self.rank.get(b.index, 0),
            retries=self.config.recovery.max_row_attempts - 1,
        )

    def figures_of(self, answer):
        return self.client.submit(figures_of_answer, answer, key=f"{answer.key}-figures", priority=PLAN_PRIORITY)

    def move(self, gone: str, watch, moved_away: set, pending, futures: list, summary: JobSummary) -> None:
        """Moves shard ``gone``'s unfinished buckets to the live shards, least loaded first. A moved task skips the
        rows its earlier attempts committed."""
        live = [s for s in self.config.shard_names if s in watch.workers and s not in watch.gone]
        if not live:
            raise JobError(
                f"no shard has a worker any more (shard {gone} is gone); the answers committed so far "
                f"are kept; run the same command again once the cluster is back to resume"
            )
        bucket, answers = self.bucket, self.answers
        load = {
            s: sum(bucket[i].rows for i, f in answers.items() if not f.done() and bucket[i].shard == s) for s in live
        }
        for i, f in list(answers.items()):
            if f.done() or bucket[i].shard != gone:
                continue
            target = min(live, key=load.__getitem__)
            load[target] += bucket[i].rows
            f.cancel()
            moved_away.add(f.key)
            bucket[i] = replace(bucket[i], shard=target)
            answers[i] = moved = self.answer(bucket[i], self.pieces[i], attempt=next(self.moves))
            summary.buckets_moved += 1
            old = self.watched[i]
            old.cancel()
            moved_away.add(old.key)
            self.watched[i] = self.figures_of(moved)
            self.of_answer[self.watched[i].key] = i
            pending.add(self.watched[i])
            futures += [moved, self.watched[i]]
