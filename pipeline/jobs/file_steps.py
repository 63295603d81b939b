"""A file job's steps on the cluster: answers committed to OUTPUT.partial as they come, each partition merged into an
output part, then OUTPUT. Ids used twice are refused on the workers before any row is answered."""

from __future__ import annotations

from typing import Callable

import numpy as np

from pipeline.data.cluster_parts import ClusterParts
from pipeline.data.errors import JobError
from pipeline.data.scoring_lines import SCORING, scoring_task
from pipeline.jobs.cluster_job import ClusterJob
from pipeline.jobs.job_plan import PLAN_PRIORITY
from pipeline.jobs.key_check import (
    duplicate_report,
    duplicates_message,
    hash_range,
    hash_ranges,
    partition_key_hashes,
    repeated_hashes,
    suspect_keys,
)
from pipeline.jobs.openai_batch import ENDPOINT_TASKS
from pipeline.model import head_labels
from pipeline.steps.cluster_tasks import JobSpec, answer_task, file_split_task, read_task
from pipeline.steps.output_tasks import finish_task, merge_task
from tasks import Embed, get_task_kind
from tasks.registry import task_kind

MIN_LINE_BYTES = 100  # no JSONL request is shorter, so it bounds a file's rows


class FileSteps:
    """The steps of a job that reads files and commits its answers to OUTPUT.partial."""

    answer = staticmethod(answer_task)
    answered: Callable[..., None] | None = None  # only a stream takes each bucket's answers as it ends
    shown: Callable[[dict], dict] | None = None  # and shows its own figures on the dashboard

    def __init__(self, source, sink: ClusterParts, check_keys: bool = False, lines=None):
        self.source, self.sink = source, sink
        # A JSONL file's rows are counted as its blocks are read, so only an earlier run can know them at the start.
        self.rows_total = (
            sink.meta.get("rows")
            if any(p.rows is None for p in sink.partitions)
            else sum(p.rows for p in sink.partitions)
        )
        self.resumed = sink.resumed
        self.check_keys = check_keys  # the workers check that no id is used twice
        self.lines = lines  # a batch job's ``ResponseLines``; None for Parquet

    def committed(self) -> int:
        return self.sink.refresh()

    def partitions(self) -> list:
        return [p for p in self.sink.partitions if not self.sink.files.merged(p.index)]

    def spec(self, **fields) -> JobSpec:
        return JobSpec(
            source=self.source,
            folder=self.sink.folder,
            schema=self.sink.schema,
            starts=tuple(p.start for p in self.sink.partitions),
            **fields,
        )

    def read(self, client, spec: JobSpec, part, key: str, resources: dict | None = None):
        """``resources`` is the read slot the task takes on its worker."""
        return client.submit(read_task, spec, part, key=key, priority=PLAN_PRIORITY, resources=resources)

    def task_kind(self, config, tokenizer):
        """A batch file's endpoint decides what each row is for the engine; any other job takes the config's task."""
        if self.lines is None:
            return get_task_kind(config, tokenizer, head_labels(config))
        if self.lines.endpoint == SCORING:
            return scoring_task(config, tokenizer)
        if self.lines.embeds:  # the config's template belongs to its own task
            return Embed(tokenizer)
        return task_kind(self.task_name(config), config.prompt, tokenizer)

    def task_name(self, config) -> str:
        """The name of ``task_kind``'s task, known before the task is made."""
        if self.lines is None:
            return config.task
        return ENDPOINT_TASKS[self.lines.endpoint]

    def rows_counted(self, rows: int) -> None:
        """Records the input's row count once every partition is read, for a resumed run's progress."""
        if self.sink.meta.get("rows") != rows:
            self.sink.record(rows=rows)

    def rows_merged(self) -> int:
        """Rows of the partitions an earlier run merged, which are not read again."""
        files = self.sink.files
        return sum(
            files.folder.num_rows(files.part_path(p.index)) for p in self.sink.partitions if files.merged(p.index)
        )

    def split(self, client, spec: JobSpec, read, place, part, key: str, resources: dict | None = None):
        """``resources`` is the read slot, as for ``read``, because a split reads its partition's texts again."""
        return client.submit(
            file_split_task, spec, read, place, part, key=key, priority=PLAN_PRIORITY, resources=resources
        )

    def key_checks(self, client, spec: JobSpec) -> list:
        """The tasks that find hashes of ids used twice, one per range of hash values."""
        if not self.check_keys:
            return []
        rows = self.rows_total if self.rows_total is not None else self.source.size // MIN_LINE_BYTES
        job, ranges = spec.job_id, hash_ranges(rows)
        hashes = [
            client.submit(
                partition_key_hashes, self.source, p, ranges, key=f"{job}-keys-{p.index}", priority=PLAN_PRIORITY
            )
            for p in self.sink.partitions
        ]
        return [
            client.submit(
                repeated_hashes,
                *(
                    client.submit(hash_range, h, k, key=f"{job}-keys-{i}-{k}", priority=PLAN_PRIORITY)
                    for i, h in enumerate(hashes)
                ),
                key=f"{job}-repeated-{k}",
                priority=PLAN_PRIORITY,
            )
            for k in range(ranges)
        ]

    def refuse_duplicates(self, client, spec: JobSpec, checks: list) -> None:
        """Raises ``JobError`` if an id is used twice; a folder this run started holds nothing yet and is removed."""
        again = np.concatenate(client.gather(checks)) if checks else []
        if not len(again):
            return
        suspects = [
            client.submit(
                suspect_keys, self.source, p, again, key=f"{spec.job_id}-suspects-{p.index}", priority=PLAN_PRIORITY
            )
            for p in self.sink.partitions
        ]
        found, shown = client.submit(duplicate_report, *suspects, key=f"{spec.job_id}-duplicates").result()
        if not found:  # the hashes collided but the ids differ
            return
        if not self.sink.resumed:
            self.sink.folder.remove()
        raise JobError(duplicates_message(self.source.key, found, shown))

    def complete(self, client, spec: JobSpec, todo: list, unreadable: dict, answers: dict) -> list:
        """Merges each readable partition and, if all were readable, writes OUTPUT; returns the futures submitted."""
        merges = [
            client.submit(merge_task, spec, p, key=f"{spec.job_id}-merge-{p.index}")
            for p in todo
            if p.index not in unreadable
        ]
        client.gather(merges)
        if unreadable:
            return merges
        finish = client.submit(
            finish_task, spec, self.sink.partitions, str(self.sink.final), self.lines, key=f"{spec.job_id}-finish"
        )
        finish.result()
        return merges + [finish]


class FileJob(ClusterJob):
    """A file job: a ``ClusterJob`` over ``FileSteps``."""

    steps: FileSteps

    @property
    def sink(self) -> ClusterParts:
        return self.steps.sink
