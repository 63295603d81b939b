"""A cluster job's tasks as the client submits them (``JobPlan``): each input partition read, its
documents placed on the shards in buckets, split into per-shard pieces, and each bucket's answer
task on its shard's worker; and, where a shard is given up on, its unfinished buckets' answer
tasks submitted again on the live shards (``move``). pipeline/jobs/cluster_job.py runs the job and
watches these tasks.
"""

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

# Several jobs on one cluster share it fairly: the short planning tasks (read's figures, place,
# split, pieces) go ahead of any job's answering, each job's k-th bucket on a shard has the same
# priority as every other job's (so a new job's first buckets run next, not after every bucket
# an earlier job queued), and answer tasks leave each worker a thread for the others' reads.
PLAN_PRIORITY = 100


def _slots_everywhere(client) -> set[str]:
    """Which of the slot resources (answer slots, read slots) every shard's worker has: a cluster
    started by an earlier version may lack one, and a task asking for it would never run."""
    workers = [w.get("resources", {}) for w in client.scheduler_info(n_workers=-1)["workers"].values()]
    shard_workers = [r for r in workers if any(k.startswith(shard_resource("")) for k in r)]
    return {
        name
        for name in (ANSWER_SLOTS_RESOURCE, READ_SLOTS_RESOURCE)
        if shard_workers and all(name in r for r in shard_workers)
    }


class JobPlan:
    """A job's tasks (futures), submitted by ``submit``; what the job's watch reads of them."""

    def __init__(self, client, spec: JobSpec, steps: JobSteps, config):
        self.client, self.spec, self.steps, self.config = client, spec, steps, config
        self.slots = _slots_everywhere(client)
        self.rank: dict[int, int] = {}  # a bucket's place among its shard's: each job's k-th go together
        self.moves = itertools.count(1)  # buckets moved off a gone shard (their tasks' keys)
        self.figures: list = []  # each read's figures, in partition order
        self.partition_of: dict = {}  # a read's figures' key -> its partition
        self.bucket: dict[int, Bucket] = {}  # bucket index -> Bucket
        self.pieces: dict = {}  # bucket index -> its shard's pieces of every partition
        self.answers: dict = {}  # bucket index -> its answer task
        self.watched: dict = {}  # bucket index -> its answer's figures
        self.of_answer: dict = {}  # an answer's figures' key -> its bucket index
        self.split_done: list = []  # each split, ended (before the merges)

    def submit(self, todo: list, shards: list[str], futures: list) -> None:
        """Each partition of ``todo`` read, its documents placed on ``shards`` in buckets, split
        into per-shard pieces, and each bucket's answer task (all added to ``futures``)."""
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
        # each partition's rows for each shard: a bucket's answer task takes its slice of its shard's
        # (P × shards tasks, not P × buckets; a bucket's entry is let go once it is answered, a
        # shard's pieces with its last bucket's)
        of_shard = {
            shard: [
                client.submit(piece_of, s, shard, key=f"{job}-piece-{p.index}-{shard}", priority=PLAN_PRIORITY)
                for s, p in zip(splits, todo)
            ]
            for shard in sorted({b.shard for b in buckets})
        }
        self.pieces = {b.index: of_shard[b.shard] for b in buckets}
        # (a file job's split also commits its partition's rows that failed reading: each must
        # run, and end before the merges, even where no bucket takes a piece of it)
        self.split_done = [
            client.submit(len, s, key=f"{job}-split-done-{p.index}", priority=PLAN_PRIORITY)
            for s, p in zip(splits, todo)
        ]
        futures += self.split_done
        # The reads and splits are let go here: Dask drops each once the tasks that take it have
        # run, so the workers hold a partition's rows once (its pieces), not three times. A worker
        # lost later takes pieces with it; Dask computes them again from the graph (the split, and
        # the read before it, rerun: a read gives the same rows again, spec.run).
        del of_shard, reads, splits
        per_shard: dict[str, int] = {}
        for b in buckets:
            self.rank[b.index] = per_shard.get(b.shard, 0)
            per_shard[b.shard] = self.rank[b.index] + 1
        self.bucket = {b.index: b for b in buckets}
        self.answers = {b.index: self.answer(b, self.pieces[b.index]) for b in buckets}
        self.watched = {i: self.figures_of(a) for i, a in self.answers.items()}  # each answer's figures
        self.of_answer = {f.key: i for i, f in self.watched.items()}
        futures += self.answers.values()
        futures += self.watched.values()

    def _place(self, reads: list, todo: list, shards: list[str], futures: list) -> tuple:
        """The read partitions' documents placed on ``shards`` (the place task, and its buckets),
        once no id is used twice."""
        client, spec, job = self.client, self.spec, self.spec.job_id
        held = held_documents(client, shards)
        documents = [
            client.submit(documents_of, r, key=f"{job}-documents-{p.index}", priority=PLAN_PRIORITY)
            for r, p in zip(reads, todo)
        ]
        checks = self.steps.key_checks(client, spec)  # (ids used twice: refused before any answer)
        futures += checks
        decode_bytes = CHARS_PER_TOKEN * self.config.sampling.max_tokens  # (ASCII: a byte a character)
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
        """Bucket ``b``'s answer task, on its shard's worker."""
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
        """Shard ``gone`` has had no worker for ``recovery.rejoin_timeout_s``: its unfinished
        buckets go to the live shards, least loaded first, their new answers' figures watched
        instead of the old ones' (the tasks cancelled here are added to ``moved_away``). A moved
        task skips the rows its earlier attempts committed (the same answer-file name), so none
        is answered twice."""
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
