"""The fault matrix (docs/operating.md, "Worker loss and recovery", "Failed writes"): one table of faults,
each injected into a cluster job (fake engine, 2 shards, ~3 s of answering) once a few answer
files are committed, and the same three checks every time (``check``):

(i)   the job either completes -- every input row exactly once, in input order, no error -- or
      stops with ONE clear error (the CLI: exit code 1 or 2, one ``error:`` line and no
      traceback; Python: a ``JobError``) that names what happened and says what to do, and
      every answer committed before the fault is still committed;
(ii)  running the same command again (resume) completes the job;
(iii) the output then has every row once, in input order, and no row was answered twice: the
      resumed run answers exactly the rows not committed (its summary, its engine requests), and
      where the answer files can be seen just before the merges (a job run in this process),
      every position is in exactly one of them.

Faults that stop a job in this process (a worker or engine death, corrupt input, output faults)
run on one embedded cluster for the module; those that need processes of their own (the client
killed, the scheduler killed) run ``python -m pipeline run`` against a resident cluster
(``python -m pipeline up``) in a folder of the module's own. The real engine's faults (its engine
core and its worker SIGKILLed mid-job) are tests/engine/test_worker_loss_engine.py's.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import cloudpickle
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from helpers.dead_engine import kill_engine as put_dead_engine
from pipeline import JobError, Pipeline, load_config, prepare_job
from pipeline.bench.workloads import document_questions
from pipeline.jobs import file_steps
from pipeline.worker.queries import worker_stats

pytestmark = pytest.mark.own_cluster  # every case runs on a cluster of this module's own

ROOT = Path(__file__).resolve().parents[2]
ROWS = 1200  # 600 a shard; 4 at a time, 0.02 s each: ~3 s a shard
PART_ROWS = 50  # rows per answer file (one input partition's)
AT_FILES = 3  # the fault comes once this many answer files are committed
STOP_WITHIN_S = 60  # a first run that neither ends nor stops by then hangs
SETTINGS = dict(
    scheduler={"dashboard_address": None},
    engine={"kind": "fake", "null_latency_s": 0.02},
    intake={"max_in_flight": 4},
    jobs={"partition_rows": 300},
)
RESUME_AGAIN = r"run the same command again to resume"


# -- what a run left ------------------------------------------------------------------------


@dataclass
class Outcome:
    """A run of the job: how it ended and what it committed."""

    completed: bool = False
    error: str | None = None  # its one error message (a JobError's, the CLI's `error:` lines)
    exit_code: int | None = None  # the CLI's
    stderr: str = ""  # the CLI's
    killed: bool = False  # the run's own process was killed (no message to check)
    committed_before: list[int] = field(default_factory=list)  # answer-file positions just before the fault
    committed_after: list[int] = field(default_factory=list)  # ... once the run had ended
    done_at_start: int = 0  # rows the run found committed (resumed)
    answered: int | None = None  # rows the run answered (its summary)
    requests: int | None = None  # engine requests finished while it ran
    answer_positions: list[int] | None = None  # every answer file's positions just before the merges
    output_written: bool = False  # OUTPUT exists when the run has ended
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


def committed_positions(partial: Path) -> list[int]:
    """The positions in OUTPUT.partial's answer files (all runs'; merging keeps them until the end):
    a position twice is a row committed twice."""
    positions = []
    for f in sorted(partial.glob("answers/p*/*.parquet")):
        try:
            positions += pq.read_table(f, columns=["position"]).column(0).to_pylist()
        except (FileNotFoundError, pa.ArrowException, OSError):  # (going as we look: the folder removed)
            pass
    return positions


def check(fault: "Fault", rows: list[dict], out: Path, first: Outcome, resumed: Outcome | None) -> None:
    """The three checks every fault gets (module docstring). Collects every problem, then fails
    with all of them."""
    problems = []

    def expect(ok, what):
        if not ok:
            problems.append(what)

    ids = [r["id"] for r in rows]

    def output_is_whole(stage):
        if not out.exists():
            problems.append(f"{stage}: no {out.name}")
            return
        got = pq.read_table(out, columns=["id", "error"]).to_pylist()
        expect(
            [g["id"] for g in got] == ids,
            f"{stage}: output ids are not the input's, each once in order "
            f"({len(got)} rows, {len(set(g['id'] for g in got))} distinct, of {len(ids)})",
        )
        errors = [g["error"] for g in got if g["error"] is not None]
        expect(not errors, f"{stage}: {len(errors)} rows answered with an error, e.g. {errors[:2]}")

    def answered_once(stage, run: Outcome):
        expect(
            fault.where != "python" or run.answer_positions is not None,
            f"{stage}: the answer files were not seen before the merges (FileSteps.complete not called?)",
        )
        if run.answer_positions is not None:
            twice = sorted(p for p, n in Counter(run.answer_positions).items() if n > 1)
            expect(not twice, f"{stage}: {len(twice)} rows committed in two answer files, e.g. positions {twice[:5]}")
            expect(
                set(run.answer_positions) == set(range(len(rows))),
                f"{stage}: the answer files hold {len(set(run.answer_positions))} of {len(rows)} rows",
            )

    # (i) completes, or one clear error with nothing committed lost
    if first.completed:
        expect(fault.expect == "complete", f"(i) the first run completed; expected it to stop ({fault.expect})")
        output_is_whole("(i)")
        answered_once("(i)", first)
    else:
        expect(fault.expect != "complete", f"(i) the first run stopped: {first.error or first.stderr[-2000:]}")
        if not first.killed:
            if first.exit_code is not None:
                expect(first.exit_code in (1, 2), f"(i) exit code {first.exit_code}, not 1 or 2")
                expect(
                    "Traceback" not in first.stderr,
                    f"(i) a traceback on stderr besides the error:\n{first.stderr[-3000:]}",
                )
                lines = [ln for ln in first.stderr.splitlines() if ln.startswith("error:")]
                expect(len(lines) == 1, f"(i) {len(lines)} `error:` lines on stderr:\n{first.stderr[-3000:]}")
            message = first.error or ""
            expect(
                re.search(fault.message, message, re.S),
                f"(i) the error does not name what happened (/{fault.message}/): {message!r}",
            )
            expect(
                re.search(fault.advice, message),
                f"(i) the error does not say what to do (/{fault.advice}/): {message!r}",
            )
        if fault.keeps_committed:
            lost = set(first.committed_before) - set(first.committed_after)
            expect(not lost, f"(i) {len(lost)} rows committed before the fault are no longer committed")
        twice = sorted(p for p, n in Counter(first.committed_after).items() if n > 1)
        expect(not twice, f"(i) {len(twice)} rows committed twice when the run stopped, e.g. {twice[:5]}")
        expect(not first.output_written, f"(i) {out.name} written by a run that stopped")

    # (ii) running the same command again completes it
    if resumed is not None:
        expect(resumed.completed, f"(ii) the rerun did not complete: {resumed.error or resumed.stderr[-3000:]}")
        for note in fault.resume_notes:
            expect(any(re.search(note, n) for n in resumed.notes), f"(ii) no note /{note}/ in {resumed.notes}")
        # (iii) every row once, in order, none answered twice
        output_is_whole("(iii)")
        expect(
            resumed.answered == len(rows) - resumed.done_at_start,
            f"(iii) the rerun answered {resumed.answered} rows; {len(rows) - resumed.done_at_start} were not "
            f"committed ({resumed.done_at_start} were)",
        )
        if resumed.requests is not None:
            expect(
                resumed.requests == len(rows) - resumed.done_at_start,
                f"(iii) {resumed.requests} engine requests in the rerun for "
                f"{len(rows) - resumed.done_at_start} rows not committed",
            )
        answered_once("(iii)", resumed)
    else:
        expect(first.completed, "(ii) not run")
    assert not problems, f"{fault.name}:\n  " + "\n  ".join(problems)


# -- the faults -------------------------------------------------------------------------------


@dataclass
class Fault:
    name: str
    where: str  # "python": a job run in this process; "cli": `python -m pipeline run`
    expect: str  # "complete", "error" (one clear error), "killed" (no message possible)
    inject: Callable | None = None  # (ctx) once AT_FILES answer files are committed
    prepare: Callable | None = None  # (ctx) before the first run
    between: Callable | None = None  # (ctx) after the first run, before the rerun
    cleanup: Callable | None = None  # (ctx) always, at the end
    happened: Callable | None = None  # (ctx) after the first run: a reason if the fault did not take effect
    message: str = ""  # the error names what happened
    advice: str = RESUME_AGAIN  # ... and says what to do
    keeps_committed: bool = True  # (a removed OUTPUT.partial takes its answers with it)
    resume_notes: tuple = ()  # what the rerun says


class Ctx:
    """What a fault works on: the case's files, and the pipeline (python) or the resident
    cluster's env and config file (cli)."""

    def __init__(self, tmp_path: Path, request):
        self.tmp, self.request = tmp_path, request
        self.rows = document_questions(ROWS // 4, 4, seed=31, order="shuffled")
        self.src = tmp_path / "in.parquet"
        self.out = tmp_path / "out.parquet"
        self.partial = tmp_path / "out.parquet.partial"
        self.p = self.env = self.config_file = self.client_proc = None
        self.corrupt_good: bytes | None = None
        self.killed, self.engine_deaths = None, 0


# python faults: on the module's embedded pipeline


def shard_worker(p, shard: str) -> str:
    from pipeline.jobs.recovery import current_workers

    return next(a for a, w in current_workers(p.client).items() if f"shard-{shard}" in (w.get("resources") or {}))


def kill_worker(ctx):
    addr = shard_worker(ctx.p, "cpu1")
    ctx.killed = ctx.p.client.run(os.getpid, workers=[addr])[addr]
    os.kill(ctx.killed, signal.SIGKILL)


def worker_restarted(ctx):
    addr = shard_worker(ctx.p, "cpu1")
    if ctx.p.client.run(os.getpid, workers=[addr])[addr] == ctx.killed:
        return f"shard cpu1 still has worker process {ctx.killed}"


def kill_engine(ctx):
    addr = shard_worker(ctx.p, "cpu1")
    ctx.engine_deaths = len(ctx.p.client.get_events("pipeline-engine-died"))
    ctx.p.client.run(put_dead_engine, workers=[addr])


def engine_died(ctx):
    died = ctx.p.client.get_events("pipeline-engine-died")[ctx.engine_deaths :]
    if not (died and died[0][1]["shard"] == "cpu1" and "engine core died" in died[0][1]["error"]):
        return f"no pipeline-engine-died event for shard cpu1 (events: {died})"


def corrupt_input(ctx):
    """Two files; the second's `document` page broken (footer and ids intact: the job starts and
    fails midway), as conftest's ``corrupt_second_file``."""
    ctx.src = ctx.tmp / "in"
    ctx.corrupt_good = ctx.request.getfixturevalue("corrupt_second_file")(ctx.src, ctx.rows, ROWS // 2)


def fix_input(ctx):
    (ctx.src / "b.parquet").write_bytes(ctx.corrupt_good)


def chattr(flag):
    def run(ctx):
        if ctx.partial.exists():
            subprocess.run(["chattr", "-R", flag, str(ctx.partial)], check=True)

    return run


def remove_partial(ctx):
    while ctx.partial.exists():  # (a write under way may add a file while it goes)
        shutil.rmtree(ctx.partial, ignore_errors=True)


def _fail_writes(dask_worker, exc: BaseException) -> None:
    """On this worker: every answer file from now on fails with ``exc``."""
    from pipeline.data import answer_files

    original = getattr(answer_files.AnswerFiles.write, "original", answer_files.AnswerFiles.write)

    def write(self, *args):
        raise exc

    write.original = original
    answer_files.AnswerFiles.write = write


def _heal_writes(dask_worker) -> None:
    from pipeline.data import answer_files

    answer_files.AnswerFiles.write = getattr(answer_files.AnswerFiles.write, "original", answer_files.AnswerFiles.write)


def disk_full(ctx):
    ctx.p.client.run(_fail_writes, exc=OSError(errno.ENOSPC, "No space left on device"))


def heal_writes(ctx):
    ctx.p.client.run(_heal_writes)


def disk_freed_then_a_file_damaged(ctx):
    """Space again, and one committed answer file cut short (a file system that kept half a write)."""
    heal_writes(ctx)
    f = sorted(ctx.partial.glob("answers/p*/*.parquet"))[0]
    with open(f, "r+b") as fh:
        fh.truncate(fh.seek(0, 2) // 2)


# cli faults: `python -m pipeline run` on the module's resident cluster


def cli(env, *args, timeout=120, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def cluster_state(env) -> dict:
    return json.loads((Path(env["PIPELINE_CLUSTER_DIR"]) / "state.json").read_text())


def kill_client(ctx):
    ctx.client_proc.send_signal(signal.SIGKILL)


def kill_scheduler(ctx):
    os.kill(cluster_state(ctx.env)["processes"]["scheduler"][0], signal.SIGKILL)


def down_then_up(ctx):
    down = cli(ctx.env, "down", "--config", ctx.config_file)
    assert down.returncode == 0, down.stdout + down.stderr
    up = cli(ctx.env, "up", "--config", ctx.config_file)
    assert up.returncode == 0 and "cluster up in" in up.stdout, up.stdout + up.stderr


FAULTS = [
    Fault("worker-killed", "python", "complete", inject=kill_worker, happened=worker_restarted),
    Fault("engine-core-died", "python", "complete", inject=kill_engine, happened=engine_died),
    Fault(
        "corrupt-input-file",
        "python",
        "error",
        prepare=corrupt_input,
        between=fix_input,
        message=r"cannot read .*b\.parquet: ",
    ),
    Fault(
        "output-immutable",
        "python",
        "error",
        inject=chattr("+i"),
        between=chattr("-i"),
        cleanup=chattr("-i"),
        message=r"cannot write answers to .*out\.parquet\.partial: PermissionError: .*Operation not permitted"
        r".*the answers committed so far are kept",
        advice=r"make it writable .*run the same command again to resume",
    ),
    Fault(
        "output-disk-full",
        "python",
        "error",
        inject=disk_full,
        between=heal_writes,
        cleanup=heal_writes,
        message=r"cannot write answers to .*: OSError: \[Errno 28\] No space left on device; "
        r"the answers committed so far are kept",
    ),
    Fault(
        "output-partial-removed",
        "python",
        "error",
        inject=remove_partial,
        keeps_committed=False,
        message=r"out\.parquet\.partial was removed while the job ran; the answers it held are gone",
        advice=r"run the same command again to start over",
    ),
    Fault(
        "answer-file-damaged-before-resume",
        "python",
        "error",
        inject=disk_full,
        between=disk_freed_then_a_file_damaged,
        cleanup=heal_writes,
        message=r"No space left on device; the answers committed so far are kept",
        resume_notes=(r"^dropped the damaged file .*\.parquet \(.*\); its rows are answered again$",),
    ),
    Fault("client-killed", "cli", "killed", inject=kill_client),
    Fault(
        "scheduler-killed",
        "cli",
        "error",
        inject=kill_scheduler,
        between=down_then_up,
        # names what happened: the cluster's scheduler is gone (or the connection to it lost)
        message=r"scheduler\b.{0,60}\b(gone|lost|died|killed|no longer|not running|unreachable|closed|stopped)"
        r"|connection to the (scheduler|cluster)",
    ),
]


# -- the clusters -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded():
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # (the fault injectors run on the workers)
    config = load_config().replace(**SETTINGS)
    with Pipeline(config) as p:
        yield p


@pytest.fixture(scope="module")
def resident(tmp_path_factory):
    """A resident cluster (`python -m pipeline up`) in a folder of its own: (env, config file)."""
    folder = tmp_path_factory.mktemp("resident")
    env = {**os.environ, "PIPELINE_CLUSTER_DIR": str(folder / "cluster")}
    config_file = folder / "cluster.yaml"
    config_file.write_text(yaml.safe_dump(load_config().replace(**SETTINGS).model_dump(mode="json")))
    up = cli(env, "up", "--config", config_file)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield env, config_file
    finally:
        down = cli(env, "down", "--config", config_file)
        assert down.returncode == 0, down.stdout + down.stderr


# -- the runner -------------------------------------------------------------------------------


def when_committed(
    partial: Path, files: int, fault: Callable[[], None], seen: dict, running: Callable[[], bool]
) -> threading.Thread:
    """A thread that runs ``fault()`` once ``files`` answer files are committed, noting in ``seen``
    what was committed just before it."""

    def watch():
        deadline = time.monotonic() + STOP_WITHIN_S
        while len(list(partial.glob("answers/p*/*.parquet"))) < files:
            if not running() or time.monotonic() > deadline:
                seen["missed"] = True  # (the run ended first: the fault never came)
                return
            time.sleep(0.01)
        seen["before"] = committed_positions(partial)
        fault()
        seen["at"] = time.monotonic()

    return threading.Thread(target=watch, daemon=True)


def engine_requests(p) -> int:
    return sum(s.get("requests", 0) for s in p.client.run(worker_stats).values())


def run_in_process(fault: Fault, ctx: Ctx, monkeypatch, first_run: bool) -> Outcome:
    """The job run in this process, on the embedded pipeline (a fault injected in the first run)."""
    outcome = Outcome()
    seen: dict = {}
    original = getattr(file_steps.FileSteps.complete, "original", file_steps.FileSteps.complete)

    def complete(self, *args, **kwargs):  # every answer task has ended: what the answer files hold
        outcome.answer_positions = committed_positions(ctx.partial)
        return original(self, *args, **kwargs)

    complete.original = original
    monkeypatch.setattr(file_steps.FileSteps, "complete", complete)
    t0 = time.monotonic()
    job = prepare_job(ctx.src, ctx.out, config=ctx.p.config, part_rows=PART_ROWS, notify=outcome.notes.append)
    outcome.notes += job.sink.notes
    outcome.done_at_start = job.done
    requests = engine_requests(ctx.p)
    ended = threading.Event()
    watcher = None
    if first_run and fault.inject is not None:
        watcher = when_committed(ctx.partial, AT_FILES, lambda: fault.inject(ctx), seen, lambda: not ended.is_set())
        watcher.start()
    try:
        summary = job.run(ctx.p, progress=False)
        outcome.completed, outcome.answered = True, summary.rows
    except JobError as exc:
        outcome.error = str(exc)
    finally:
        ended.set()
        if watcher is not None:
            watcher.join()
    outcome.seconds = time.monotonic() - t0
    if first_run and fault.inject is not None:
        assert not seen.get("missed"), f"{fault.name}: the job ended before {AT_FILES} answer files were committed"
    outcome.committed_before = seen.get("before", [])
    outcome.output_written = ctx.out.exists()
    if not outcome.completed:
        settled(ctx.p)  # (a stopped job's cancelled answer tasks end on the workers: none commits later)
        outcome.committed_after = committed_positions(ctx.partial)
    if not first_run and outcome.completed:
        outcome.requests = engine_requests(ctx.p) - requests
    return outcome


def running_tasks(dask_worker) -> list[str]:
    return [k for k, ts in dask_worker.state.tasks.items() if ts.state in ("executing", "long-running", "cancelled")]


def settled(p, timeout_s: float = 30.0) -> None:
    """Wait until no task runs on ``p``'s workers (a cancelled one too, as the worker sees it)."""
    deadline = time.monotonic() + timeout_s
    while any(p.client.run(running_tasks).values()):
        assert time.monotonic() < deadline, p.client.run(running_tasks)
        time.sleep(0.05)


def cluster_requests(env, config_file) -> int:
    status = cli(env, "status", "--json", "--config", config_file)
    assert status.returncode == 0, status.stdout + status.stderr
    return sum(s["requests"] for s in json.loads(status.stdout)["shards"].values())


def run_cli(fault: Fault, ctx: Ctx, first_run: bool) -> Outcome:
    """``python -m pipeline run`` on the resident cluster (a fault injected in the first run)."""
    outcome = Outcome()
    seen: dict = {}
    args = [ctx.src, ctx.out, "--part-rows", PART_ROWS, "--quiet", "--config", ctx.config_file]
    requests = None if first_run else cluster_requests(ctx.env, ctx.config_file)
    t0 = time.monotonic()
    proc = ctx.client_proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", *map(str, args)],
        cwd=ROOT,
        env=ctx.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watcher = None
    if first_run and fault.inject is not None:
        watcher = when_committed(ctx.partial, AT_FILES, lambda: fault.inject(ctx), seen, lambda: proc.poll() is None)
        watcher.start()
    try:
        stdout, stderr = proc.communicate(timeout=STOP_WITHIN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(
            f"{fault.name}: `run` neither ended nor stopped within {STOP_WITHIN_S} s (a hang):\n{stderr[-3000:]}"
        )
    finally:
        if watcher is not None:
            watcher.join()
    outcome.seconds = time.monotonic() - t0
    if first_run and fault.inject is not None:
        assert not seen.get("missed"), f"{fault.name}: the job ended before {AT_FILES} answer files were committed"
    outcome.exit_code, outcome.stderr = proc.returncode, stderr
    outcome.completed = proc.returncode == 0
    outcome.killed = proc.returncode == -signal.SIGKILL
    outcome.error = "\n".join(ln.removeprefix("error: ") for ln in stderr.splitlines() if ln.startswith("error:"))
    outcome.notes = stderr.splitlines()
    outcome.committed_before = seen.get("before", [])
    outcome.output_written = ctx.out.exists()
    resuming = re.search(r"resuming: (\d+) of \d+ rows are already in", stderr)
    outcome.done_at_start = int(resuming.group(1)) if resuming else 0
    answered = re.search(r"^rows: (\d+) ", stdout, re.M)
    outcome.answered = int(answered.group(1)) if answered else None
    if not outcome.completed:
        # a killed client's job stops on the cluster too: what it committed, once nothing more comes
        quiet_since, last = time.monotonic(), None
        while time.monotonic() - quiet_since < 1.0 and time.monotonic() - t0 < STOP_WITHIN_S:
            now = committed_positions(ctx.partial)
            if now != last:
                quiet_since, last = time.monotonic(), now
            time.sleep(0.1)
        outcome.committed_after = last or []
    elif requests is not None:
        outcome.requests = cluster_requests(ctx.env, ctx.config_file) - requests
    return outcome


def run_with_fault(fault: Fault, tmp_path: Path, request, monkeypatch) -> tuple[Ctx, Outcome, Outcome | None]:
    """The job with ``fault`` injected mid-way, then (unless it completed) the same command
    again: (the case's files, first outcome, resumed outcome or None)."""
    ctx = Ctx(tmp_path, request)
    if fault.where == "python":
        ctx.p = request.getfixturevalue("embedded")
        run = lambda first_run: run_in_process(fault, ctx, monkeypatch, first_run)  # noqa: E731
    else:
        ctx.env, ctx.config_file = request.getfixturevalue("resident")
        run = lambda first_run: run_cli(fault, ctx, first_run)  # noqa: E731
    pq.write_table(pa.Table.from_pylist(ctx.rows), ctx.src, row_group_size=300)
    try:
        if fault.prepare:
            fault.prepare(ctx)
        first = run(True)
        if fault.happened:
            missing = fault.happened(ctx)
            assert missing is None, f"{fault.name}: the fault did not take effect: {missing}"
        if first.completed:
            return ctx, first, None
        if fault.between:
            fault.between(ctx)
        return ctx, first, run(False)
    finally:
        if fault.cleanup:
            fault.cleanup(ctx)


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_fault(fault, tmp_path, request, monkeypatch):
    t0 = time.monotonic()
    ctx, first, resumed = run_with_fault(fault, tmp_path, request, monkeypatch)
    print(
        f"\n{fault.name}: first run {'completed' if first.completed else 'stopped'} in {first.seconds:.1f} s"
        f" (exit {first.exit_code}; {first.error!r}); rerun "
        + (
            f"{'completed' if resumed.completed else 'failed'} in {resumed.seconds:.1f} s, answered "
            f"{resumed.answered} of {ROWS - resumed.done_at_start} not committed"
            if resumed
            else "not needed"
        )
        + f"; {time.monotonic() - t0:.1f} s in all"
    )
    check(fault, ctx.rows, ctx.out, first, resumed)
