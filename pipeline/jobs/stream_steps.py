"""A stream window's steps (``Pipeline.stream``, pipeline/client/iterable_job.py): the window's
partitions' prompt rows, made on the client, are the reads; answers are kept in the cluster's
memory and each bucket's are handed back as it ends."""

from __future__ import annotations

import pyarrow as pa

from pipeline.jobs.kept_steps import KeptSteps
from pipeline.summary import Figures


def _read(read):
    """A stream partition's read: its prompt rows and figures, made on the client (the task's
    argument; Dask computes it again wherever a lost worker held it)."""
    return read


class IterableSteps(KeptSteps):
    """A window's steps on the cluster (pipeline/jobs/cluster_job.py): its partitions' prompt
    rows, made here, are the reads; answers are kept in memory and each bucket's go to
    ``on_answers`` (a table of ``ANSWER_SCHEMA`` rows, positions as the window's) as it ends."""

    def __init__(self, window, task, on_answers, shown):
        """``window``: the stream's window (``client.iterable_job.Window``: its ``parts``, their
        ``sizes``, its ``rows``)."""
        super().__init__(window.parts, task=task)
        self.window, self.on_answers, self.shown = window, on_answers, shown
        self.rows_total = window.rows

    def read(self, client, spec, part, key: str, resources: dict | None = None):
        from pipeline.jobs.job_plan import PLAN_PRIORITY

        rows = self.window.parts[part.index]
        # (submitted, the rows are the task's: the client lets go of its copy, so that it holds a
        # window's prompt rows only while it reads them, not while they are answered)
        self.window.parts[part.index] = None
        figures = Figures.of_read(self.window.sizes[part.index], rows.errors.column("error"))
        return client.submit(_read, (rows, figures), key=key, priority=PLAN_PRIORITY)

    def answered(self, client, answer) -> None:
        """A bucket's answer task ended: its answers, to ``on_answers`` (``TimeoutError``: they
        were lost with their worker before they came here)."""
        from pipeline.jobs.cluster_job import LOST_AFTER_S

        _, by_partition = answer.result(timeout=LOST_AFTER_S)
        if by_partition:
            self.on_answers(pa.concat_tables(list(by_partition.values())))

    def complete(self, client, spec, todo: list, unreadable: dict, answers: dict) -> list:
        return []
