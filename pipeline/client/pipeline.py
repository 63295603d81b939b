"""Python API: submit rows, get results back in input order or as they complete.

from pipeline import Pipeline
with Pipeline() as p:                      # embedded cluster from cluster.yaml
    for r in p.stream(rows):               # as they are answered
        print(r.id, r.answer)
    results = p.run(rows)                  # in input order
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sized

from distributed import Client

from pipeline import console, engine_env
from pipeline.client import dataframes
from pipeline.client.iterable_job import IterableJob
from pipeline.client.tokenizer import load_tokenizer
from pipeline.cluster import resident
from pipeline.cluster.engines import held_documents, start_engines, wait_for_shard_workers
from pipeline.cluster.local import apply_dask_settings, connect, worker_log_dir
from pipeline.cluster.resident_state import ClusterState
from pipeline.cluster.security import dask_security
from pipeline.config import Config, SamplingConfig, engine_kind, load_config
from pipeline.model import head_labels, model_for
from pipeline.results import RowResult
from pipeline.summary import JobSummary
from pipeline.worker.queries import reset_worker, stop_engine, worker_stats
from tasks import get_task_kind


class Pipeline:
    """A running pipeline: the cluster and one resident engine per shard.

    Without a ``client`` and without ``scheduler.address`` in the config it uses the resident
    local cluster when one is up for the same config (``python -m pipeline up``; a different
    config is a ``ClusterMismatch`` error), else it starts an embedded one, whose workers log to
    one file per shard under the cache folder (``verbose=True``: to this terminal). Dask's and
    vLLM's loggers in this process are kept to warnings while it runs, as on the command line
    (``verbose=True`` leaves them as they are).
    ``notify`` gets the few lines worth telling the user (which cluster, each engine's start;
    default: stderr); ``live`` a line to show in place while engines start (a terminal)."""

    def __init__(
        self,
        config: Config | str | None = None,
        *,
        engine: str | None = None,
        client: Client | None = None,
        verbose: bool = False,
        notify=None,
        live=None,
        start_timeout_s: float = 600.0,
    ):
        self.config = config if isinstance(config, Config) else load_config(config)
        self.engine_kind = engine_kind(engine) if engine else self.config.engine.kind  # ("null": fake's old name)
        self._client = client
        self._cluster: Any = None
        self._owns_client = client is None
        self.verbose = verbose
        self.notify = notify or console.notify
        self.live = live
        self.start_timeout_s = start_timeout_s
        self.resident: ClusterState | None = None  # the resident cluster in use, if any
        self.log_dir: Path | None = None  # the embedded cluster's worker logs
        self.last_report: JobSummary | None = None
        self._log_levels: dict | None = None  # the loggers' levels before start (restored at close)

    # -- life cycle -------------------------------------------------------------
    def start(self) -> "Pipeline":
        self._driver_env = engine_env.snapshot()
        if not self.verbose and self._log_levels is None:
            self._log_levels = console.quiet_logs()
        self.model = model_for(self.config, self.engine_kind)
        # The shards run on this machine: each vLLM engine pinned to its own devices. (Fake engines
        # pin nothing: any number of them may share the cores, to measure the plumbing at scale.)
        if self.engine_kind == "vllm" and not self.config.scheduler.address and self._client is None:
            self.config.require_layout(self.model)
        self.tokenizer = load_tokenizer(self.model)
        self.task = get_task_kind(self.config, self.tokenizer, head_labels(self.config))
        if self._client is None:
            try:
                self._client, self._cluster = self._connect()
            finally:
                # The user's process as it was: the nannies wrote Dask's worker variables into
                # it, and libraries loaded here may set more (torch's TORCHINDUCTOR_CACHE_DIR was
                # seen); pipeline/engine_env.py.
                engine_env.restore(self._driver_env)
        wait_for_shard_workers(self._client, self.config, self.start_timeout_s)
        logs = str(self.log_dir) if self.log_dir else self.resident.log_dir if self.resident else None
        stats = start_engines(
            self._client, self.config, self.model, self.engine_kind, self.notify, self.live, logs=logs
        )
        self.block_size = min(s["block_size"] for s in stats)  # the engines' KV-cache block (tokens)
        # what every engine serves ("generate", "embed"), and an embedding's size (an embedding model's)
        self.engine_tasks = frozenset.intersection(*(frozenset(s.get("tasks", ("generate",))) for s in stats))
        self.embedding_size = stats[0].get("embedding_size")
        if self.resident is not None:
            age = self.resident.uptime_s
            held = len(held_documents(self._client, self.config.shard_names))
            self.notify(
                f"using the local cluster at {self.resident.address} (up {age / 60:.0f} min, "
                f"{sum(s['requests'] for s in stats)} requests served, {held} documents cached; "
                f"`python -m pipeline down` stops it)"
            )
        return self

    def _connect(self) -> tuple[Client, object]:
        """The resident cluster when one is up for this config, else an embedded one."""
        if not self.config.scheduler.address:
            state = resident.find(self.config.replace(engine={"kind": self.engine_kind}), self.model, self.notify)
            if state is not None:
                self.resident = state
                apply_dask_settings(self.config)
                return Client(state.address, security=dask_security(self.config), direct_to_workers=True), None
        if not self.config.scheduler.address and not self.verbose:
            self.log_dir = worker_log_dir(self.config)
            self.notify(f"worker logs: {self.log_dir}/<shard>.log")
        return connect(self.config, log_dir=self.log_dir)

    def close(self) -> None:
        if self._cluster is not None and self._client is not None:
            self._stop_engines()
        if self._client is not None and self._owns_client:
            if self._client.status == "connecting" and not self.verbose:
                # The scheduler is gone and the client still tries to reach it: closing cancels that,
                # and Dask logs the cancellation with two tracebacks, after the job has said what
                # happened (pipeline/jobs/cluster_job.py).
                with console.quiet_logger("distributed.client"):
                    self._client.close()
            else:
                self._client.close()
        if self._cluster is not None:
            self._cluster.close()
            # A nanny that restarted its worker meanwhile wrote Dask's variables again.
            engine_env.restore(self._driver_env, engine_env.nanny_keys())
        self._client = self._cluster = None
        if self._log_levels is not None:
            console.restore_logs(self._log_levels)
            self._log_levels = None

    def _stop_engines(self, timeout_s: float = 60.0) -> None:
        """Embedded cluster only: stop every engine before the workers close (Dask's nanny
        kills a worker still closing after 4 s, which leaves the engine to the reaper). An
        engine that takes longer than ``timeout_s`` is left to that path."""

        def run() -> None:
            try:
                self.client.run(stop_engine, on_error="return")
            except Exception:  # noqa: BLE001 - closing anyway
                pass

        t = threading.Thread(target=run, name="pipeline-stop-engines", daemon=True)
        t.start()
        t.join(timeout_s)

    def __enter__(self) -> "Pipeline":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def client(self) -> Client:
        if self._client is None:
            raise RuntimeError("the pipeline is not started (use it as `with Pipeline() as p:` or call start())")
        return self._client

    @property
    def dashboard_link(self) -> str | None:
        if self._client is None or (self._cluster is not None and not self.config.scheduler.dashboard_address):
            return None  # (an embedded cluster started without one: Dask still makes up a link)
        return self._client.dashboard_link

    def worker_stats(self) -> list[dict]:
        return [s for s in self.client.run(worker_stats).values() if s]

    def reset_cache(self) -> None:
        """Forget every cached prefix: the engines' prefix caches and what their workers remember
        holding (between benchmark runs, so each starts cold)."""
        self.client.run(reset_worker)

    # -- submission -------------------------------------------------------------
    def run(self, rows: Iterable[Mapping[str, Any]], **options) -> list[RowResult]:
        """Results in input order, one per row (``options``: ``stream``'s)."""
        return sorted(self.stream(rows, **options), key=lambda r: r.index)

    def map_dataframe(
        self,
        df,
        *,
        task: str | None = None,
        prompt: dict | None = None,
        sampling: dict | None = None,
        truncate_prompts: bool = False,
    ):
        """Answer every row of a Dask (or pandas) DataFrame with the task's columns; returns a
        Dask DataFrame of the output columns (``answer``, ``error``, token counts, ...) with the
        input's index, partitions and divisions. Runs the job now; the answers stay in the
        cluster's memory for the returned DataFrame (pipeline/client/dataframes.py says what runs
        when). ``task``, ``prompt``, ``sampling``: this job's, over the config's."""
        return dataframes.map_dataframe(
            self, df, task=task, prompt=prompt, sampling=sampling, truncate_prompts=truncate_prompts
        )

    def stream(
        self,
        rows: Iterable[Mapping[str, Any]],
        *,
        task=None,
        sampling: SamplingConfig | Mapping | None = None,
        truncate_prompts: bool = False,
        watched: bool = False,
        rows_total: int | None = None,
    ) -> Iterator[RowResult]:
        """Results as they are answered (not in input order); one per row.

        Answers come back a bucket at a time (a shard's share of a window's documents).
        ``watched``: someone watches this job's progress (a notebook, a terminal): the first
        windows are then small (64 rows, each next twice the one before) and, with
        ``advanced.intake.first_answer_rows`` unset, each engine answers a first row before the rest, so
        the first answers come within seconds, at some cost in throughput.

        ``rows`` may be any iterable: it is read a window at a time (``advanced.intake.read_ahead_rows``
        rows or ``advanced.intake.read_ahead_chars`` characters of prompt text), each window answered as
        a cluster job (a document's questions are grouped within it) while the next is read, so
        memory stays bounded however long the input is. ``task``: a task other than the configured
        one, by name (``"generate"``) or as a task kind (e.g. ``tasks.Chat``, ``tasks.PromptTemplate``);
        ``sampling``: this job's sampling
        settings instead of the config's (a ``SamplingConfig`` or a mapping of its keys; a row's
        columns of the same names override them for that row, pipeline/sampling.py);
        ``truncate_prompts``: cut prompts longer than the model's context instead of answering
        them with an error. ``rows_total``: how many rows ``rows`` holds, for the dashboard's
        progress (default: ``len(rows)`` for a sized input; else known once it is all read).

        A worker lost mid-job costs no row: Dask computes what it held again once the nanny has
        restarted it, and a shard whose worker does not come back within
        ``advanced.recovery.rejoin_timeout_s`` has its buckets moved to the others. Each row is yielded
        exactly once; ``self.last_report`` says what happened. (How the rows run on the cluster:
        pipeline/client/iterable_job.py.)"""
        if rows_total is None and isinstance(rows, Sized):
            rows_total = len(rows)
        job = IterableJob(self, rows, task, sampling, truncate_prompts, watched, rows_total)
        self.last_report = job.report
        yield from job.results()
