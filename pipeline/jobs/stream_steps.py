"""A stream window's steps: prompt rows made on the client are the reads, and each bucket's answers are handed back
as it ends."""

from __future__ import annotations

import pyarrow as pa

from pipeline.jobs.kept_steps import KeptSteps
from pipeline.summary import Figures


def _read(read):
    """Returns the rows made on the client; as a task, Dask can recompute it wherever a lost worker held it."""
    return read


class IterableSteps(KeptSteps):
    """A stream window's steps; each bucket's answers go to ``on_answers`` as an ``ANSWER_SCHEMA`` table."""

    def __init__(self, window, task, on_answers, shown):
        """``window`` is the stream's ``Window``, with its ``parts``, their ``sizes`` and its ``rows``."""
        super().__init__(window.parts, task=task)
        self.window, self.on_answers, self.shown = window, on_answers, shown
        self.rows_total = window.rows

    def read(self, client, spec, part, key: str, resources: dict | None = None):
        from pipeline.jobs.job_plan import PLAN_PRIORITY

        rows = self.window.parts[part.index]
        # Once submitted the rows belong to the task, so the client holds a window's rows only while reading them.
        self.window.parts[part.index] = None
        figures = Figures.of_read(self.window.sizes[part.index], rows.errors.column("error"))
        return client.submit(_read, (rows, figures), key=key, priority=PLAN_PRIORITY)

    def answered(self, client, answer) -> None:
        """Hands a finished bucket's answers to ``on_answers``; ``TimeoutError`` if they were lost with their worker."""
        from pipeline.jobs.cluster_job import LOST_AFTER_S

        _, by_partition = answer.result(timeout=LOST_AFTER_S)
        if by_partition:
            self.on_answers(pa.concat_tables(list(by_partition.values())))

    def complete(self, client, spec, todo: list, unreadable: dict, answers: dict) -> list:
        return []
