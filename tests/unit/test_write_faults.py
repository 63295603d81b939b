"""Writes that fail while a cluster job runs (fake engine, 2 shards): an OUTPUT.partial made
immutable, full, removed, or left with a damaged answer file. Each time: the job stops at once
with one clear error (no retry of what a retry cannot fix, no engine time spent on answers that
cannot be written), or goes on where a retry helps; and the rerun the message advises ends with
every row once, in input order."""

import errno
import gc
import itertools
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import cloudpickle
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import JobError, Pipeline, load_config, prepare_job
from pipeline.bench.workloads import document_questions
from pipeline.data.answer_files import ANSWER_SCHEMA, AnswerFiles
from pipeline.jobs.cluster_job import JobLeft
from pipeline.worker.queries import worker_stats

ROWS = 1600  # 800 a shard; 4 at a time, 0.02 s each: ~4 s a shard
PART_ROWS = 50  # rows per answer file (one input partition)
IN_FLIGHT = 4
# after the fault a shard answers at most the rows of the commit that fails, those it answers while
# that is written and those in flight: under two commits' worth (without stopping: its whole bucket, 3 times)
AFTER_FAULT = 2 * 2 * PART_ROWS
UNSEEN = "Future exception was never retrieved"


@pytest.fixture(scope="module")
def pipeline():
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # (the fault injectors run on the workers)
    config = load_config().replace(
        scheduler={"dashboard_address": None},
        engine={"kind": "fake", "null_latency_s": 0.02},
        intake={"max_in_flight": IN_FLIGHT},
        jobs={"partition_rows": 10_000},
    )
    with Pipeline(config) as p:
        yield p


@pytest.fixture
def src(tmp_path):
    rows = document_questions(ROWS // 4, 4, seed=21, order="shuffled")
    path = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return rows, path


def job(p, src, out, notes=None):
    return prepare_job(
        src, out, config=p.config, part_rows=PART_ROWS, notify=(notes.append if notes is not None else lambda m: None)
    )


def requests(p) -> int:
    """Engine requests finished so far, all shards."""
    return sum(s.get("requests", 0) for s in p.client.run(worker_stats).values())


def at_answer_files(partial, files: int, fault) -> dict:
    """Runs ``fault()`` once ``files`` answer files are committed in ``partial`` (in a thread);
    what it saw: the time and engine requests at the fault."""
    seen = {}

    def watch():
        deadline = time.monotonic() + 60
        while len(list(partial.glob("answers/p*/*.parquet"))) < files and time.monotonic() < deadline:
            time.sleep(0.01)
        fault()
        seen["at"] = time.monotonic()
        seen["requests"] = requests(seen["p"])

    seen["thread"] = threading.Thread(target=watch)
    return seen


def run_faulted(p, job_, seen) -> tuple[JobError, float, int]:
    """The job run with the fault: its error, seconds from the fault to it, and the engine
    requests finished after the fault (once the cancelled tasks have let go)."""
    seen["p"] = p
    seen["thread"].start()
    with pytest.raises(JobError) as stopped:
        job_.run(p, progress=False)
    took = time.monotonic() - seen["at"]
    seen["thread"].join()
    time.sleep(1.0)  # (whatever still ran has finished)
    return stopped.value, took, requests(p) - seen["requests"]


def unseen_failures(p) -> int:
    p.client.run(gc.collect)  # (asyncio says so when an unretrieved future is collected)
    return sum((p.log_dir / f"{s}.log").read_text().count(UNSEEN) for s in p.config.shard_names)


def check_output(out, rows) -> None:
    got = pq.read_table(out, columns=["id", "error"]).to_pylist()
    assert [g["id"] for g in got] == [r["id"] for r in rows]  # every row once, in input order
    assert all(g["error"] is None for g in got)


def test_an_output_folder_made_immutable_mid_job_stops_it_at_once_and_the_rerun_finishes(pipeline, src, tmp_path):
    rows, path = src
    out, partial = tmp_path / "out.parquet", tmp_path / "out.parquet.partial"
    first = job(pipeline, path, out)
    seen = at_answer_files(partial, 3, lambda: subprocess.run(["chattr", "-R", "+i", str(partial)], check=True))
    try:
        error, took, after = run_faulted(pipeline, first, seen)
    finally:
        subprocess.run(["chattr", "-R", "-i", str(partial)], check=True)
    assert re.search(
        r"cannot write answers to .*out\.parquet\.partial: PermissionError: .*Operation not permitted"
        r".*; the answers committed so far are kept; make it writable \(or free space\) and run the "
        r"same command again to resume",
        str(error),
    ), error
    print(f"\nimmutable: stopped {took:.2f} s after the fault; {after} engine requests after it")
    assert took < 5.0
    assert after <= AFTER_FAULT  # (no retries: each would answer its bucket again)
    assert unseen_failures(pipeline) == 0

    notes = []
    again = job(pipeline, path, out, notes)
    done = again.done
    assert done >= 3 * PART_ROWS and notes == [
        f"resuming: {done} of {ROWS} rows are already in {again.sink.dir}; answering the rest"
    ]
    assert again.run(pipeline, progress=False).rows == ROWS - done
    check_output(out, rows)


def test_output_partial_removed_mid_job_stops_it_and_the_rerun_starts_over(pipeline, src, tmp_path):
    rows, path = src
    out, partial = tmp_path / "out.parquet", tmp_path / "out.parquet.partial"

    def remove():
        while partial.exists():  # (a write under way may add a file while it goes)
            shutil.rmtree(partial, ignore_errors=True)

    seen = at_answer_files(partial, 3, remove)
    error, took, after = run_faulted(pipeline, job(pipeline, path, out), seen)
    assert str(error) == (
        f"{partial} was removed while the job ran; the answers it held are gone; run the same "
        f"command again to start over"
    )
    print(f"\nremoved: stopped {took:.2f} s after the fault; {after} engine requests after it")
    assert took < 5.0 and after <= AFTER_FAULT
    assert not partial.exists()  # (no write made it again)

    notes = []
    again = job(pipeline, path, out, notes)
    assert again.done == 0 and not notes
    assert again.run(pipeline, progress=False).rows == ROWS
    check_output(out, rows)


def _fail_writes(dask_worker, after: int, exc: BaseException, times: int) -> None:
    """On this worker: answer files ``after`` .. ``after + times - 1`` fail with ``exc``."""
    from pipeline.data import answer_files

    original = answer_files.AnswerFiles.write
    count = itertools.count()

    def write(self, *args):
        if after <= next(count) < after + times:
            raise exc
        return original(self, *args)

    write.original = original
    answer_files.AnswerFiles.write = write


def _heal_writes(dask_worker) -> None:
    from pipeline.data import answer_files

    answer_files.AnswerFiles.write = getattr(answer_files.AnswerFiles.write, "original", answer_files.AnswerFiles.write)


def _slow_writes(dask_worker, seconds: float) -> None:
    """On this worker: each answer file is written ``seconds`` late."""
    from pipeline.data import answer_files

    original = answer_files.AnswerFiles.write

    def write(self, *args):
        time.sleep(seconds)
        return original(self, *args)

    write.original = original
    answer_files.AnswerFiles.write = write


def test_once_a_failed_write_has_stopped_the_job_nothing_more_of_it_is_written(pipeline, src, tmp_path):
    """The other shard's commit under way when the job stops ends before ``run`` raises, so a rerun
    reads a folder that stays as it read it (it did not: a commit landing after the rerun had read
    the folder made it count rows it never answered, or answer them twice)."""
    rows, path = src
    out, partial = tmp_path / "out.parquet", tmp_path / "out.parquet.partial"
    failing, slow = sorted(pipeline.client.scheduler_info()["workers"])
    pipeline.client.run(
        _fail_writes, after=1, exc=OSError(errno.ENOSPC, "No space left on device"), times=1, workers=[failing]
    )
    pipeline.client.run(_slow_writes, seconds=1.0, workers=[slow])
    try:
        with pytest.raises(JobError, match="No space left on device"):
            job(pipeline, path, out).run(pipeline, progress=False)
        files = sorted(partial.glob("answers/p*/*.parquet"))
        time.sleep(1.5)  # (longer than a slow write)
        assert sorted(partial.glob("answers/p*/*.parquet")) == files
    finally:
        pipeline.client.run(_heal_writes)
    again = job(pipeline, path, out)
    done = again.done
    assert done and again.run(pipeline, progress=False).rows == ROWS - done
    check_output(out, rows)


def test_a_job_let_go_keeps_every_answer_it_counted(pipeline, src, tmp_path):
    """Let go (a batch cancelled or expired) before any commit was due: the answers counted as
    answered are committed before ``run`` raises, so a batch keeps what it said was completed."""
    rows, path = src
    out = tmp_path / "out.parquet"
    first = prepare_job(path, out, config=pipeline.config, part_rows=10_000, flush_seconds=60.0, notify=lambda m: None)
    stop, counted = threading.Event(), []

    def on_progress(done, failed, tokens):
        if done >= 100 and not stop.is_set():
            counted.append(done)
            stop.set()

    with pytest.raises(JobLeft):
        first.run(pipeline, progress=False, stop=stop, on_progress=on_progress)
    again = job(pipeline, path, out)
    done = again.done
    assert 100 <= counted[0] <= done < ROWS
    assert again.run(pipeline, progress=False).rows == ROWS - done
    check_output(out, rows)


@pytest.mark.parametrize(
    "exc, retried",
    [
        (OSError(errno.ENOSPC, "No space left on device"), False),
        (OSError(errno.EROFS, "Read-only file system"), False),
        (ConnectionError("the store did not answer"), True),  # (e.g. an object store's network)
    ],
    ids=["disk-full", "read-only", "transient"],
)
def test_a_failed_write_is_retried_only_where_a_retry_can_help(pipeline, src, tmp_path, exc, retried):
    rows, path = src
    out = tmp_path / "out.parquet"
    pipeline.client.run(_fail_writes, after=2, exc=exc, times=1)
    try:
        first = job(pipeline, path, out)
        if retried:  # Dask runs the answer task again: it answers only what is not committed
            assert first.run(pipeline, progress=False).rows == ROWS
            check_output(out, rows)
            return
        t0 = time.monotonic()
        with pytest.raises(
            JobError,
            match=rf"cannot write answers to .*: OSError: \[Errno {exc.errno}\] "
            rf"{exc.strerror}; .*run the same command again to resume",
        ):
            first.run(pipeline, progress=False)
        assert time.monotonic() - t0 < 8.0  # (a bucket answered in full takes ~4 s; with retries ~12 s)
    finally:
        pipeline.client.run(_heal_writes)
    again = job(pipeline, path, out)
    done = again.done
    assert again.run(pipeline, progress=False).rows == ROWS - done
    check_output(out, rows)
    assert unseen_failures(pipeline) == 0


def test_a_rerun_drops_damaged_answer_files_and_answers_their_rows_again(pipeline, src, tmp_path):
    rows, path = src
    out = tmp_path / "out.parquet"
    first = job(pipeline, path, out)  # (its folder started; then, as if a run had committed these:)
    files = AnswerFiles(first.sink.folder)

    def answers(lo, hi):
        return pa.Table.from_arrays(
            [
                pa.array(range(lo, hi), pa.int64())
                if f.name == "position"
                else pa.array(["kept"] * (hi - lo))
                if f.name == "answer"
                else pa.nulls(hi - lo, f.type)
                for f in ANSWER_SCHEMA
            ],
            schema=ANSWER_SCHEMA,
        )

    files.write(0, "old-b000000-00000", answers(0, 100))
    files.write(0, "old-b000001-00000", answers(100, 200))
    files.write(0, "old-b000002-00000", pa.table({"position": pa.array(range(200, 300), pa.int64())}))
    answers_dir = files.folder.path("answers", "p000000")
    torn = f"{answers_dir}/old-b000001-00000.parquet"
    with open(torn, "r+b") as f:  # (cut short: a file system that kept half a write)
        f.truncate(f.seek(0, 2) // 2)

    notes = []
    again = job(pipeline, path, out, notes)
    assert again.done == 100 and again.sink.notes == [
        f"dropped the damaged file {torn} (Parquet magic bytes not found in footer. Either the file is corrupted "
        f"or this is not a parquet file.); its rows are answered again",
        f"dropped the damaged file {answers_dir}/old-b000002-00000.parquet (not this job's columns); "
        f"its rows are answered again",
    ]
    assert notes[-1] == f"resuming: 100 of {ROWS} rows are already in {again.sink.dir}; answering the rest"
    assert again.run(pipeline, progress=False).rows == ROWS - 100
    check_output(out, rows)
    answered = pq.read_table(out, columns=["answer"]).column("answer").to_pylist()
    assert answered[:100] == ["kept"] * 100 and answered[100:] == [""] * (ROWS - 100)


def test_no_write_makes_a_removed_folder_again_and_each_error_is_classed(tmp_path):
    """Local and object-store folders alike: a write into a removed OUTPUT.partial raises
    ``OutputGone`` and leaves nothing behind; subfolders inside a present one are made."""
    import fsspec

    from pipeline.data.errors import OutputGone
    from pipeline.data.job_folder import META, LocalFolder, StoreFolder, permanent_write_error
    from pipeline.worker.engine import EngineDead

    table = pa.table({"position": [1]})
    for folder in (
        LocalFolder(tmp_path / "out.partial"),
        StoreFolder(fsspec.filesystem("memory"), "/faults/out.partial", "memory://faults/out.partial"),
    ):
        folder.create()
        folder.write_bytes(folder.path(META), b"{}")
        folder.write_table(folder.path("answers", "p000000", "a.parquet"), table)
        assert folder.read_table(folder.path("answers", "p000000", "a.parquet")).equals(table)
        folder.remove()
        with pytest.raises(
            OutputGone,
            match=rf"^{re.escape(folder.url)} was removed while the job ran; the "
            r"answers it held are gone; run the same command again to start over$",
        ):
            folder.write_table(folder.path("answers", "p000001", "b.parquet"), table)
        assert not folder.glob("**/*") and not folder.present()
    assert not (tmp_path / "out.partial").exists()

    for exc, permanent in [
        (PermissionError(errno.EPERM, "Operation not permitted"), True),
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
        (OSError(errno.EROFS, "Read-only file system"), True),
        (OutputGone("gone"), True),
        (ConnectionError("reset"), False),
        (OSError(errno.EIO, "I/O error"), False),
        (TimeoutError("slow"), False),
        (EngineDead("engine core died"), False),
    ]:
        assert permanent_write_error(exc) is permanent, exc


def test_dropping_torn_files_passes_one_a_late_writer_renamed_meanwhile(tmp_path, monkeypatch):
    """A rerun opened just after a job stopped: a task of the stopped run may still be finishing a
    write, renaming its temporary file between the rerun's listing and its removal. The rerun
    drops the torn files it can and goes on (it once failed with FileNotFoundError)."""
    from pathlib import Path

    from pipeline.data.job_folder import LocalFolder

    folder = LocalFolder(tmp_path / "out.partial")
    folder.create()
    torn = tmp_path / "out.partial" / "answers" / "p000000"
    torn.mkdir(parents=True)
    (torn / ".run-b000000-00000.parquet.tmp").write_bytes(b"half")
    (torn / ".run-b000001-00000.parquet.tmp").write_bytes(b"half")
    glob = Path.glob

    def listed_then_renamed(self, pattern):
        found = list(glob(self, pattern))
        os.replace(found[0], found[0].with_name("run-b000000-00000.parquet"))  # (the late writer's rename)
        return found

    monkeypatch.setattr(Path, "glob", listed_then_renamed)
    folder.drop_torn()
    monkeypatch.undo()
    assert sorted(p.name for p in torn.iterdir()) == ["run-b000000-00000.parquet"]
