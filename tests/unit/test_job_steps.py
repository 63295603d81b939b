"""Every job kind implements ``JobSteps`` (pipeline/jobs/job_steps.py), and only a file job has a
partial output (``FileJob.sink``). No cluster: the kinds are built, not run."""

from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import load_config, prepare_job
from pipeline.data.row_checks import RowColumns
from pipeline.jobs.cluster_job import ClusterJob
from pipeline.jobs.file_steps import FileJob, FileSteps
from pipeline.jobs.frame_steps import FrameSteps
from pipeline.jobs.job_steps import JobSteps
from pipeline.jobs.stream_steps import IterableSteps
from tasks import Columns


def test_every_job_kind_is_a_job_steps_and_only_a_file_job_has_a_sink(tmp_path):
    pq.write_table(pa.table({"document": ["d"], "question": ["q"]}), tmp_path / "in.parquet")
    job = prepare_job(tmp_path / "in.parquet", tmp_path / "out.parquet", config=load_config(), notify=lambda m: None)
    assert isinstance(job, FileJob) and isinstance(job.steps, FileSteps) and job.sink.partitions
    frame = FrameSteps(
        [], RowColumns.of(Columns(required=("document", "question")), ["document", "question"]), ["answer"], 0
    )
    stream = IterableSteps(SimpleNamespace(parts=[], sizes=[], rows=0), None, print, None)
    for steps in (job.steps, frame, stream):
        assert isinstance(steps, JobSteps), type(steps).__name__
    assert not hasattr(ClusterJob(frame, load_config(), False), "sink")
