"""What a job kind gives the coordinator (``ClusterJob``, pipeline/jobs/cluster_job.py): its
input's partitions and how the workers read them, how each bucket is answered and its answers
kept, and how the job ends. The kinds: ``FileSteps`` (Parquet or OpenAI batch files in, answer
files and OUTPUT out: file_steps), ``FrameSteps`` (a Dask DataFrame: frame_steps) and
``IterableSteps`` (a stream's window: stream_steps); the last two share ``KeptSteps``
(kept_steps: answers kept in the cluster's memory, nothing to resume)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pipeline.steps.cluster_tasks import JobSpec


@runtime_checkable
class JobSteps(Protocol):
    resumed: int  # rows an earlier run committed (0: nothing to resume)
    rows_total: int | None  # the job's rows (None until every partition is read)
    answer: Callable[..., Any]  # the answer task each bucket runs on its shard
    answered: Callable[..., None] | None  # given each bucket's answer as it ends (a stream's); None: not asked
    shown: Callable[[dict], dict] | None  # the job's figures as the dashboard shows them; None: as they are

    def committed(self) -> int:
        """Rows whose answers are kept for good so far (a file job's committed rows)."""

    def partitions(self) -> list:
        """The partitions left to read (a resumed file job's: those not merged yet)."""

    def spec(self, **fields) -> "JobSpec":
        """The ``JobSpec`` every task of the job gets (``fields``: the job's own settings)."""

    def read(self, client, spec: "JobSpec", part, key: str, resources: dict | None = None):
        """The task that reads partition ``part`` as prompt rows."""

    def split(self, client, spec: "JobSpec", read, place, part, key: str, resources: dict | None = None):
        """The task that cuts a partition's rows by shard and bucket once they are placed."""

    def key_checks(self, client, spec: "JobSpec") -> list:
        """The tasks that look for ids used twice ([]: rows are keyed by their place)."""

    def refuse_duplicates(self, client, spec: "JobSpec", checks: list) -> None:
        """Raise ``JobError`` naming ids used twice, from ``key_checks``' tasks."""

    def rows_merged(self) -> int:
        """Rows of partitions an earlier run merged (not read again)."""

    def rows_counted(self, rows: int) -> None:
        """Every partition is read: the job has ``rows`` rows (kept for a resumed run's progress)."""

    def task_kind(self, config, tokenizer):
        """The task kind the rows are prompts of."""

    def task_name(self, config) -> str:
        """The name of ``task_kind``'s task, known before it is made (tasks/registry.py)."""

    def complete(self, client, spec: "JobSpec", todo: list, unreadable: dict, answers: dict) -> list:
        """The tasks that end the job once every bucket is answered (a file job's merges and OUTPUT)."""
