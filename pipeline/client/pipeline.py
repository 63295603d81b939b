"""Python API: submit rows, get results back in input order or as they complete.

    from pipeline import Pipeline
    with Pipeline() as p:                      # embedded cluster from cluster.yaml
        for r in p.stream(rows):               # as batches complete
            print(r.id, r.answer)
        results = p.run(rows)                  # in input order
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sized

from distributed import Client

from pipeline import console, engine_env
from pipeline.client import dataframes
from pipeline.client.dispatch import Dispatcher
from pipeline.client.job_state import ReadRow
from pipeline.client.router import Prefix, PrefixRouter
from pipeline.client.stream import StreamJob
from pipeline.client.tokenizer import load_tokenizer
from pipeline.cluster import resident
from pipeline.cluster.resident_state import ClusterState
from pipeline.cluster.engines import held_documents, start_engines, wait_for_shard_workers
from pipeline.cluster.local import apply_dask_settings, connect, worker_log_dir
from pipeline.cluster.security import dask_security
from pipeline.config import Config, SamplingConfig, engine_kind, load_config
from pipeline.model import model_for
from pipeline.prefix_memory import prefix_digest
from pipeline.results import RowResult
from pipeline.sampling import Sampling, SamplingError, checked
from pipeline.summary import JobSummary
from pipeline.worker.plugin import reset_worker, stop_engine, worker_stats
from tasks import RowError, get_task_kind


@dataclass
class TransferStats:
    batches: int = 0
    encoded_bytes: int = 0   # compressed task inputs actually shipped
    raw_bytes: int = 0       # the same prompts' text if every row carried its own
    per_shard_rows: dict = field(default_factory=dict)


# Prefixes the tokenizer measures the characters-per-token ratio on (routing.prefix_units).
CHARS_PER_TOKEN_SAMPLE = 64


class Pipeline:
    """A running pipeline: the cluster, one resident engine per shard, the router.

    Without a ``client`` and without ``scheduler.address`` in the config it uses the resident
    local cluster when one is up for the same config (``python -m pipeline up``; a different
    config is a ``ClusterMismatch`` error), else it starts an embedded one, whose workers log to
    one file per shard under the cache folder (``verbose=True``: to this terminal). Dask's and
    vLLM's loggers in this process are kept to warnings while it runs, as on the command line
    (``verbose=True`` leaves them as they are).
    ``notify`` gets the few lines worth telling the user (which cluster, each engine's start;
    default: stderr); ``live`` a line to show in place while engines start (a terminal)."""

    def __init__(self, config: Config | str | None = None, *, engine: str | None = None, client: Client | None = None,
                 verbose: bool = False, notify=None, live=None, start_timeout_s: float = 600.0):
        self.config = config if isinstance(config, Config) else load_config(config)
        self.engine_kind = engine_kind(engine) if engine else self.config.engine.kind   # ("null": fake's old name)
        self._client = client
        self._cluster = None
        self._owns_client = client is None
        self.verbose = verbose
        self.notify = notify or console.notify
        self.live = live
        self.start_timeout_s = start_timeout_s
        self.resident: ClusterState | None = None   # the resident cluster in use, if any
        self.known_prefixes: dict[int, str] = {}              # from earlier jobs: digest -> shard
        self._infos: OrderedDict[int, Prefix] = OrderedDict()  # prefix digest -> its Prefix (LRU)
        self.chars_per_token: float | None = None             # measured on the first prefixes
        self.max_blocks = self.config.routing.max_blocks      # the router's bound (start: from the KV caches)
        self.log_dir = None                                   # the embedded cluster's worker logs
        self.transfer = TransferStats()
        self.last_report: JobSummary | None = None
        self._log_levels: dict | None = None   # the loggers' levels before start (restored at close)

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
        self.task = get_task_kind(self.config, self.tokenizer)
        if self._client is None:
            try:
                self._client, self._cluster = self._connect()
            finally:
                # The user's process as it was: the nannies wrote Dask's worker variables into
                # it, and libraries loaded here may set more (torch's TORCHINDUCTOR_CACHE_DIR was
                # seen); pipeline/engine_env.py.
                engine_env.restore(self._driver_env)
        wait_for_shard_workers(self._client, self.config, self.start_timeout_s)
        stats = start_engines(self._client, self.config, self.model, self.engine_kind, self.notify, self.live,
                              logs=self.log_dir or (self.resident.log_dir if self.resident else None))
        block_size = self.config.routing.block_size or min(s["block_size"] for s in stats)
        kv_blocks = sum(s.get("kv_cache_tokens") or 0 for s in stats) // block_size
        self.max_blocks = min(self.config.routing.max_blocks, 2 * kv_blocks) if kv_blocks else \
            self.config.routing.max_blocks
        self.router = self.new_router(block_size)
        held = self._seed_router()
        if self.resident is not None:
            age = self.resident.uptime_s
            self.notify(f"using the local cluster at {self.resident.address} (up {age / 60:.0f} min, "
                        f"{sum(s['requests'] for s in stats)} requests served, {held} documents cached; "
                        f"`python -m pipeline down` stops it)")
        kv_share = self.config.intake.kv_budget_share
        self.token_budget = {s["shard"]: kv_share * s["kv_cache_tokens"] for s in stats
                             if s.get("kv_cache_tokens") and kv_share}
        return self

    def _connect(self) -> tuple[Client, object]:
        """The resident cluster when one is up for this config, else an embedded one."""
        if not self.config.scheduler.address:
            state = resident.find(self.config.replace(engine={"kind": self.engine_kind}), self.model, self.notify)
            if state is not None:
                self.resident = state
                apply_dask_settings()
                return Client(state.address, security=dask_security(self.config), direct_to_workers=True), None
        if not self.config.scheduler.address and not self.verbose:
            self.log_dir = worker_log_dir(self.config)
            self.notify(f"worker logs: {self.log_dir}/<shard>.log")
        return connect(self.config, log_dir=self.log_dir)

    def _seed_router(self) -> int:
        """What the engines hold from earlier jobs, as their workers remember it: prefix digest
        -> shard, told to the router when a row brings that prefix (pipeline/prefix_memory.py).
        Returns the number of prefixes."""
        self.known_prefixes = held_documents(self._client, self.router.shards)
        return len(self.known_prefixes)

    def new_router(self, block_size: int | None = None) -> PrefixRouter:
        """A fresh router with this pipeline's settings (and its block size unless given)."""
        block_size = block_size or self.router.block_size
        r = self.config.routing
        return PrefixRouter(self.config.shard_names, block_size, self.max_blocks, r.decode_weight,
                            r.min_match, r.imbalance_abs, r.imbalance_ratio)

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
                self._client.run(stop_engine, on_error="return")
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
        return self._client

    @property
    def dashboard_link(self) -> str | None:
        if self._client is None or (self._cluster is not None and not self.config.scheduler.dashboard_address):
            return None   # (an embedded cluster started without one: Dask still makes up a link)
        return self._client.dashboard_link

    def worker_stats(self) -> list[dict]:
        return [s for s in self._client.run(worker_stats).values() if s]

    def reset_cache(self) -> None:
        """Forget every cached prefix: the engines' prefix caches and the router's view of
        them (between benchmark runs, so each starts cold)."""
        self._client.run(reset_worker)
        self.router = self.new_router()
        self.known_prefixes = {}
        self.transfer = TransferStats()

    # -- submission -------------------------------------------------------------
    def run(self, rows: Iterable[Mapping[str, Any]]) -> list[RowResult]:
        """Results in input order, one per row."""
        out = sorted(self.stream(rows), key=lambda r: r.index)
        return out

    def map_dataframe(self, df, *, task: str | None = None, prompt: dict | None = None,
                      sampling: dict | None = None, truncate_prompts: bool = False, prefetch: int = 2):
        """Answer every row of a Dask (or pandas) DataFrame with the task's columns; returns a
        Dask DataFrame of the output columns (``answer``, ``error``, token counts, ...) with the
        input's index, partitions and divisions. Runs the job now; the answers stay in the
        cluster's memory for the returned DataFrame (pipeline/client/dataframes.py says what runs
        when). ``task``, ``prompt``, ``sampling``: this job's, over the config's."""
        return dataframes.map_dataframe(self, df, task=task, prompt=prompt, sampling=sampling,
                             truncate_prompts=truncate_prompts, prefetch=prefetch)

    def stream(self, rows: Iterable[Mapping[str, Any]], *, task=None, sampling: SamplingConfig | Mapping | None = None,
               truncate_prompts: bool = False, watched: bool = False,
               rows_total: int | None = None) -> Iterator[RowResult]:
        """Results as their batches complete (not in input order); one per row.

        ``watched``: someone watches this job's progress (a terminal); with
        ``intake.first_answer_rows`` unset, its first answers then come early, at some cost in
        throughput (README, "Start-up and first answer").

        ``rows`` may be any iterable: at most ``intake.read_ahead_rows`` rows (and
        ``intake.read_ahead_chars`` characters of prompt text) wait unbound at a time (a
        document's questions are grouped within that window), so memory stays bounded however
        long the input is. ``task``: a task kind other than the configured
        one (e.g. ``tasks.Chat``, ``tasks.PromptTemplate``); ``sampling``: this job's sampling
        settings instead of the config's (a ``SamplingConfig`` or a mapping of its keys; a row's
        columns of the same names override them for that row, pipeline/sampling.py);
        ``truncate_prompts``: cut prompts longer than the model's context instead of answering
        them with an error. ``rows_total``: how many rows ``rows`` holds, for the dashboard's
        progress (default: ``len(rows)`` for a sized input; else known once it is all read).

        A worker lost mid-job costs no row: Dask runs its batches again once the nanny has
        restarted it, and a shard whose worker does not come back within
        ``recovery.rejoin_timeout_s`` has its rows re-routed to the others (pipeline/client/recovery.py).
        Each row is yielded exactly once; ``self.last_report`` says what happened. (The feed
        itself: pipeline/client/stream.py.)"""
        if rows_total is None and isinstance(rows, Sized):
            rows_total = len(rows)
        job = StreamJob(self, rows, task, sampling, truncate_prompts, watched, rows_total)
        self.last_report = job.report
        yield from job.results()

    def _forget_known(self, shard: str | None) -> None:
        """A fresh engine on ``shard``: what its worker said it held before is gone too."""
        self.known_prefixes = {d: s for d, s in self.known_prefixes.items() if s != shard}

    def static_assignment(self, rows: list[Mapping[str, Any]]) -> dict[str, list[int]]:
        """Row indices per shard as this pipeline's router splits them when every row is bound
        up front (what a client doing the same routing without late binding would send)."""
        dispatcher = self._dispatcher(late_binding=False, router=self.new_router())
        read, infos = self._read_rows(list(enumerate(rows)))
        for r in read:
            if r.error is None:
                dispatcher.add(r.index, r.prefix, r.suffix, infos[r.prefix])
        out: dict[str, list[int]] = {s: [] for s in self.config.shard_names}
        for shard, groups in dispatcher.bind():
            out[shard] += [i for items in groups.values() for i, _ in items]
        return out

    def _dispatcher(self, late_binding: bool, router: PrefixRouter | None = None,
                    watched: bool = False, decode_tokens: int | None = None) -> Dispatcher:
        intake = self.config.intake
        first = intake.first_rows(watched)
        return Dispatcher(router if router is not None else self.router, intake.batch_size, intake.queue_per_shard,
                          decode_tokens=decode_tokens or self.config.sampling.max_tokens, late_binding=late_binding,
                          group=self.config.routing.group_by_prefix, token_budget=self.token_budget,
                          first_rows=first if late_binding else 0, worker_slots=intake.concurrent_batches)

    def _read_rows(self, rows: list[tuple[int, Mapping[str, Any]]], task=None,
                   known=None, overrides: dict[int, Sampling] | None = None) -> tuple[list[ReadRow], dict[str, Prefix]]:
        """(index, row) pairs split into prompt parts (or why not), and the ``Prefix`` of each
        prefix that ``known(prefix)`` does not already hold. A row's own sampling settings (its
        columns named in ``sampling.ROW_COLUMNS``) go to ``overrides``."""
        out = []
        split = (task or self.task).split
        for i, row in rows:
            try:
                parts = split(row)
                own = checked(row)
                if own is not None and overrides is not None:
                    overrides[i] = own
                out.append(ReadRow(i, row.get("id", i), parts.prefix, parts.suffix))
            except (RowError, SamplingError) as exc:
                out.append(ReadRow(i, row.get("id", i), error=str(exc)))
        new = [r.prefix for r in out if r.error is None and not (known and known(r.prefix))]
        return out, self._prefix_infos(new)

    def _prefix_infos(self, prefixes: list[str]) -> dict[str, Prefix]:
        """Each distinct prefix's ``Prefix``: its length and block hashes, from its characters or
        its tokens (``routing.prefix_units``; token ids are not kept)."""
        unique = list(dict.fromkeys(prefixes))
        if not unique:
            return {}
        if self.config.routing.prefix_units == "tokens":
            out = self._token_prefixes(unique)
        else:
            ratio, block = self._chars_per_token(unique), self.router.block_size
            out = {p: Prefix.of_text(p, block, ratio) for p in unique}
        if self.known_prefixes:  # held by an engine since an earlier job: the router learns where
            for p in unique:
                shard = self.known_prefixes.pop(prefix_digest(p), None)
                if shard is not None and shard not in self.router.down:
                    self.router.seed(shard, out[p])
        return out

    def _token_prefixes(self, unique: list[str]) -> dict[str, Prefix]:
        """By tokens: a prefix seen before in this pipeline comes from an LRU keyed by the text's
        digest (``intake.prefix_cache_entries``), so a document whose questions lie far apart in
        the input is tokenized once; the others are tokenized together, in one call."""
        cache, out, missing = self._infos, {}, []
        digests = {p: prefix_digest(p) for p in unique}
        for p, d in digests.items():
            info = cache.get(d)
            if info is None:
                missing.append(p)
            else:
                cache.move_to_end(d)
                out[p] = info
        if missing:
            block = self.router.block_size
            for p, ids in zip(missing, self.tokenizer(missing, add_special_tokens=False)["input_ids"]):
                out[p] = cache[digests[p]] = Prefix.of(ids, block)
            while len(cache) > self.config.intake.prefix_cache_entries:
                cache.popitem(last=False)
        return out

    def _chars_per_token(self, sample: list[str]) -> float:
        """Characters per token of this pipeline's prefixes, as the model's tokenizer counts them
        on the first ones it sees (``CHARS_PER_TOKEN_SAMPLE`` at most); fixed from then on, so
        every prefix is hashed in the same blocks."""
        if self.chars_per_token is None:
            sample = sample[:CHARS_PER_TOKEN_SAMPLE]
            tokens = sum(map(len, self.tokenizer(sample, add_special_tokens=False)["input_ids"]))
            self.chars_per_token = sum(map(len, sample)) / tokens if tokens else 4.0
        return self.chars_per_token
