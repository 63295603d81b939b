"""What a DataFrame's and a stream window's steps share: answers stay in the cluster's memory, nothing is resumed,
and rows are keyed by position."""

from __future__ import annotations

from typing import Callable

from pipeline.data.partitions import PartNumber
from pipeline.model import head_labels
from pipeline.steps.cluster_tasks import JobSpec, kept_answer_task, split_task
from tasks import get_task_kind


class KeptSteps:
    """``source`` is what the workers read ``parts`` with; ``task`` is the task kind, None for the config's."""

    resumed = 0
    rows_total: int | None = None
    answered: Callable[..., None] | None = None  # only a stream takes each bucket's answers as it ends
    shown: Callable[[dict], dict] | None = None  # and shows its own figures on the dashboard
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
        """Takes no read slot, because this split reads nothing again."""
        from pipeline.jobs.job_plan import PLAN_PRIORITY

        return client.submit(split_task, read, place, key=key, priority=PLAN_PRIORITY)

    def key_checks(self, client, spec) -> list:  # rows are keyed by position
        return []

    def refuse_duplicates(self, client, spec, checks: list) -> None:
        return None

    def rows_merged(self) -> int:  # every partition is read
        return 0

    def rows_counted(self, rows: int) -> None:  # nothing to resume
        pass

    def task_kind(self, config, tokenizer):
        return self.task if self.task is not None else get_task_kind(config, tokenizer, head_labels(config))

    def task_name(self, config) -> str:
        """The name of ``task_kind``'s task, known before the task is made."""
        return getattr(self.task, "name", "chat") if self.task is not None else config.task
