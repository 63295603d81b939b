"""What the steps of a job whose answers are kept in the cluster's memory have in common (a
Dask DataFrame's, pipeline/client/dataframes.py; a stream window's,
pipeline/client/iterable_job.py): nothing committed, nothing to resume, no ids to check, each
partition split as it was read. pipeline/jobs/cluster_job.py runs them."""

from __future__ import annotations

from typing import Callable

from pipeline.data.partitions import PartNumber
from pipeline.model import head_labels
from pipeline.steps.cluster_tasks import JobSpec, kept_answer_task, split_task
from tasks import get_task_kind


class KeptSteps:
    """``parts``: the job's partitions (one per entry); ``source``: what the workers read them
    with (``JobSpec.source``); ``task``: the task kind (None: the config's)."""

    resumed = 0
    rows_total: int | None = None
    answered: Callable[..., None] | None = None  # (a stream's steps take each bucket's answers as it ends)
    shown: Callable[[dict], dict] | None = None  # (and show the stream's figures on the dashboard)
    answer = staticmethod(kept_answer_task)

    def __init__(self, parts: list, source=None, task=None):
        self.parts, self.source, self.task = parts, source, task

    def committed(self) -> int:
        return 0

    def partitions(self) -> list:
        return [PartNumber(i) for i in range(len(self.parts))]

    def spec(self, **fields) -> JobSpec:
        return JobSpec(source=self.source, folder=None, schema=None, **fields)

    def split(self, client, spec, read, place, part, key: str, resources: dict | None = None):
        """(``resources`` is not asked for: the split reads nothing again.)"""
        from pipeline.jobs.job_plan import PLAN_PRIORITY

        return client.submit(split_task, read, place, key=key, priority=PLAN_PRIORITY)

    def key_checks(self, client, spec) -> list:  # (rows are keyed by their place: a frame's index, a stream's)
        return []

    def refuse_duplicates(self, client, spec, checks: list) -> None:  # (no checks: nothing to refuse)
        return None

    def rows_merged(self) -> int:  # (every partition is read)
        return 0

    def rows_counted(self, rows: int) -> None:  # (nothing to resume: no record kept)
        pass

    def task_kind(self, config, tokenizer):
        return self.task if self.task is not None else get_task_kind(config, tokenizer, head_labels(config))

    def task_name(self, config) -> str:
        """The name of ``task_kind``'s task (known before it is made)."""
        return getattr(self.task, "name", "chat") if self.task is not None else config.task
