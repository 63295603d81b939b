"""A Dask DataFrame job's steps: each partition is computed and read on a worker, and answered into a pandas
DataFrame."""

from __future__ import annotations

from pipeline.data.row_checks import RowColumns
from pipeline.jobs.kept_steps import KeptSteps


class FrameSteps(KeptSteps):
    """A Dask DataFrame job's steps; after the job, ``frames`` holds one future per partition, in order."""

    def __init__(self, parts: list, columns: RowColumns, out_columns: list[str], rows_total: int | None):
        super().__init__(parts, source=columns)
        self.out_columns = out_columns
        self.rows_total = rows_total
        self.frames: list = []
        self._tails: dict = {}  # partition -> what its merge needs of its read

    def read(self, client, spec, part, key: str, resources: dict | None = None):
        """Takes no read slot: a partition is read where the cluster computed it, maybe on a worker with no shard."""
        from pipeline.jobs.job_plan import PLAN_PRIORITY
        from pipeline.steps.frame_tasks import frame_read_task, frame_tail_of

        frame = client.compute(
            self.parts[part.index], priority=PLAN_PRIORITY
        )  # computed on the cluster, read beside it
        read = client.submit(frame_read_task, spec, frame, part.index, key=key, priority=PLAN_PRIORITY)
        # Keep what the merge needs, because the read itself is let go once it is split.
        self._tails[part.index] = client.submit(frame_tail_of, read, key=f"{key}-tail", priority=PLAN_PRIORITY)
        return read

    def complete(self, client, spec, todo: list, unreadable: dict, answers: dict) -> list:
        """Merges each partition's answers on the cluster and waits for them without fetching them."""
        from distributed import wait

        from pipeline.steps.cluster_tasks import kept_piece
        from pipeline.steps.frame_tasks import frame_merge_task

        job = spec.job_id
        merges = []
        for p in todo:
            pieces = [
                client.submit(kept_piece, a, p.index, key=f"{job}-kept-{p.index}-{b}") for b, a in answers.items()
            ]
            merges.append(
                client.submit(
                    frame_merge_task,
                    self._tails.pop(p.index),
                    p.index,
                    self.out_columns,
                    *pieces,
                    key=f"{job}-merge-{p.index}",
                )
            )
        wait(merges)
        for f in merges:
            if f.status != "finished":
                f.result()  # raises the task's error
        self.frames = merges
        return []
