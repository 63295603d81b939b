"""What a job kind gives ``ClusterJob``: its partitions and how they are read, how each bucket is answered and kept,
and how the job ends."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pipeline.steps.cluster_tasks import JobSpec


@runtime_checkable
class JobSteps(Protocol):
    resumed: int  # rows an earlier run committed
    rows_total: int | None  # None until every partition is read
    answer: Callable[..., Any]  # the answer task each bucket runs on its shard
    answered: Callable[..., None] | None  # takes each bucket's answers as it ends
    shown: Callable[[dict], dict] | None  # adapts the job's figures for the dashboard

    def committed(self) -> int:
        """Rows whose answers are kept for good so far."""

    def partitions(self) -> list:
        """The partitions left to read; a resumed file job skips those it merged."""

    def spec(self, **fields) -> "JobSpec":
        """The ``JobSpec`` every task of the job gets, with the job's own ``fields``."""

    def read(self, client, spec: "JobSpec", part, key: str, resources: dict | None = None):
        """The task that reads partition ``part`` as prompt rows."""

    def split(self, client, spec: "JobSpec", read, place, part, key: str, resources: dict | None = None):
        """The task that cuts a partition's rows by shard and bucket once they are placed."""

    def key_checks(self, client, spec: "JobSpec") -> list:
        """The tasks that look for ids used twice; none where rows are keyed by position."""

    def refuse_duplicates(self, client, spec: "JobSpec", checks: list) -> None:
        """Raises ``JobError`` naming the ids that ``key_checks`` found used twice."""

    def rows_merged(self) -> int:
        """Rows of the partitions an earlier run merged, which are not read again."""

    def rows_counted(self, rows: int) -> None:
        """Records the job's row count once every partition is read."""

    def task_kind(self, config, tokenizer):
        """The task kind the rows are prompts of."""

    def task_name(self, config) -> str:
        """The name of ``task_kind``'s task, known before the task is made."""

    def complete(self, client, spec: "JobSpec", todo: list, unreadable: dict, answers: dict) -> list:
        """The tasks that end the job once every bucket is answered."""
