"""Python API: submit rows, get results back in input order or as they complete.

    from pipeline import Pipeline
    with Pipeline() as p:                      # embedded cluster from cluster.yaml
        for r in p.stream(rows):               # as batches complete
            print(r.id, r.answer)
        results = p.run(rows)                  # in input order
"""
from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sized

import dask
from distributed import Client, KilledWorker, as_completed

from pipeline import codec, console, engine_env
from pipeline.client import dataframes
from pipeline.client.dispatch import Dispatcher
from pipeline.client.job_state import Cancel, Emit, JobState, ReadRow, Submit
from pipeline.client.recovery import ShardWatch
from pipeline.client.router import Prefix, PrefixRouter
from pipeline.client.tokenizer import load_tokenizer
from pipeline.cluster import resident
from pipeline.cluster.resident_state import ClusterState
from pipeline.cluster.engines import held_documents, start_engines, wait_for_shard_workers
from pipeline.cluster.local import apply_dask_settings, connect, worker_log_dir
from pipeline.cluster.security import dask_security
from pipeline.config import Config, SamplingConfig, load_config
from pipeline.model import model_for
from pipeline.names import VIEW_METADATA_KEY
from pipeline.prefix_memory import prefix_digest
from pipeline.results import RowResult
from pipeline.sampling import Sampling, SamplingError, checked
from pipeline.summary import GONE, LOST, REJOINED, JobSummary
from pipeline.worker.engine import EngineDead
from pipeline.worker.plugin import reset_worker, run_batch, stop_engine, worker_stats
from tasks import RowError, get_task_kind


@dataclass
class TransferStats:
    batches: int = 0
    encoded_bytes: int = 0   # compressed task inputs actually shipped
    raw_bytes: int = 0       # the same prompts' text if every row carried its own
    per_shard_rows: dict = field(default_factory=dict)


# Rows read, split and tokenized at a time: large enough that the tokenizer batches well, small
# enough that the first batches go out soon.
READ_CHUNK_ROWS = 8192
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
        self.engine_kind = engine or self.config.engine.kind
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
        self._view_published = 0.0
        self._log_levels: dict | None = None   # the loggers' levels before start (restored at close)

    # -- life cycle -------------------------------------------------------------
    def start(self) -> "Pipeline":
        self._driver_env = engine_env.snapshot()
        if not self.verbose and self._log_levels is None:
            self._log_levels = console.quiet_logs()
        self.model = model_for(self.config, self.engine_kind)
        # The shards run on this machine: each vLLM engine pinned to its own devices. (Null engines
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
        return self._client.dashboard_link if self._client is not None else None

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
        Each row is yielded exactly once; ``self.last_report`` says what happened."""
        job_id = f"pipeline-job-{uuid.uuid4().hex[:12]}"
        rec = self.config.recovery
        if isinstance(sampling, Mapping):
            sampling = self.config.replace(sampling=dict(sampling)).sampling
        sampling = sampling or self.config.sampling
        job_sampling = sampling.as_sampling(self.config.engine.seed)
        state = JobState(job_id, self._dispatcher(late_binding=self.config.routing.late_binding, watched=watched,
                                                  decode_tokens=sampling.max_tokens),
                         self.config.intake.read_ahead_rows, rec.max_row_attempts,
                         read_ahead_chars=self.config.intake.read_ahead_chars,
                         fast_batch_s=self.config.intake.fast_batch_s)
        self.last_report = state.report
        state.report.rows_total = rows_total if rows_total is not None else \
            len(rows) if isinstance(rows, Sized) else None
        span = {"name": (job_id,), "ids": (str(uuid.uuid4()),)}  # one Dask span per job
        watch = ShardWatch(self._client, {s.name: s.resource for s in self.config.shards},
                           rec.poll_interval_s, rec.rejoin_timeout_s)
        running = as_completed()
        futures: dict[str, tuple[Any, float]] = {}   # batch id -> its future, when it was submitted
        source = enumerate(rows)
        overrides: dict[int, Sampling] = {}   # unanswered row -> its own sampling settings

        def carry_out(instructions: list) -> Iterator[RowResult]:
            for ins in instructions:
                if isinstance(ins, Emit):
                    if overrides:
                        for r in ins.rows:
                            overrides.pop(r.index, None)
                    yield from ins.rows
                elif isinstance(ins, Submit):
                    with dask.annotate(span=span):
                        fut = self._submit(ins.batch_id, ins.shard, ins.groups, truncate_prompts, job_sampling,
                                           overrides)
                    futures[ins.batch_id] = fut, time.perf_counter()
                    running.add(fut)
                elif isinstance(ins, Cancel):
                    futures.pop(ins.batch_id)[0].cancel()

        def read() -> Iterator[RowResult]:
            want = min(state.rows_wanted, READ_CHUNK_ROWS)
            if want:
                chunk = list(itertools.islice(source, want))
                yield from carry_out(state.rows_read(*self._read_rows(chunk, task, state.holds, overrides)))
                if len(chunk) < want:
                    yield from carry_out(state.input_ended())

        def rejoined(shard: str) -> list:
            self._forget_known(shard)
            return state.shard_rejoined(shard)

        def on_shard_events(events) -> Iterator[RowResult]:
            handlers = {LOST: state.shard_lost, REJOINED: rejoined, GONE: state.shard_gone}
            for ev in events:
                state.report.events.append(ev)
                yield from carry_out(handlers[ev.kind](ev.shard))

        yield from read()
        while not state.finished:
            if not state.in_flight:
                if state.stalled:   # every live shard is full or gone: wait for the shards
                    yield from on_shard_events(self._wait_for(None, watch))
                yield from read()
                continue
            yield from on_shard_events(self._wait_for(running, watch))
            self._publish_view(state, watch)
            while running.has_ready():
                fut = next(running)
                entry = futures.pop(fut.key, None)
                if entry is None:   # cancelled and re-routed
                    fut.release()
                    continue
                t0 = entry[1]
                if fut.status == "finished":
                    result = codec.decode_result(fut.result())
                    fut.release()
                    yield from carry_out(state.batch_done(fut.key, result.results, time.perf_counter() - t0))
                else:
                    exc = fut.exception() if fut.status == "error" else None
                    fut.release()
                    error = f"{type(exc).__name__}: {exc}" if exc is not None else "batch cancelled"
                    dead = isinstance(exc, EngineDead)
                    if dead:
                        self._forget_known(self._shard_of(fut.key, state))
                    yield from carry_out(state.batch_failed(fut.key, error, engine_dead=dead,
                                                            killed_worker=isinstance(exc, KilledWorker)))
                yield from read()
        self._publish_view(state, watch, force=True)

    @staticmethod
    def _shard_of(batch_id: str, state: JobState) -> str | None:
        batch = state.in_flight.get(batch_id)
        return batch.shard if batch is not None else None

    def _forget_known(self, shard: str | None) -> None:
        """A fresh engine on ``shard``: what its worker said it held before is gone too."""
        self.known_prefixes = {d: s for d, s in self.known_prefixes.items() if s != shard}

    def _wait_for(self, running, watch: ShardWatch) -> list:
        """Wait until a batch completes or it is time to look at the workers again; returns
        the shard events seen."""
        if running is None:
            time.sleep(watch.interval_s)
        else:
            # Checked under the condition's lock: as_completed queues a finished future, then
            # notifies under this lock, so a completion between check and wait is never missed.
            with running.thread_condition:
                if not running.has_ready():
                    running.thread_condition.wait(timeout=watch.interval_s)
        return watch.poll()

    def _publish_view(self, state: JobState, watch: ShardWatch, force: bool = False) -> None:
        """The client's view (router, job) for the dashboard page, at most once a poll interval."""
        now = time.monotonic()
        if not force and now - self._view_published < watch.interval_s:
            return
        self._view_published = now
        dispatcher = state.dispatcher
        view = {"job": state.report.as_dict(), "time": time.time(), "pending_rows": dispatcher.pending_rows,
                "shards": {s: {"rows_bound": dispatcher.in_flight[s], "documents_bound": dispatcher.prefixes_bound[s],
                               "prefix_blocks_held": self.router.blocks_held[s],
                               "outstanding_tokens": self.router.outstanding[s],
                               "routing": "out" if s in self.router.down else "in",
                               "worker": watch.workers.get(s)} for s in self.config.shard_names}}
        self._client.set_metadata(VIEW_METADATA_KEY, view)

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
        return Dispatcher(router or self.router, intake.batch_size, intake.queue_per_shard,
                          decode_tokens=decode_tokens or self.config.sampling.max_tokens, late_binding=late_binding,
                          group=self.config.routing.group_by_prefix, token_budget=self.token_budget,
                          first_rows=first if late_binding else 0)

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

    def _submit(self, batch_id: str, shard: str, groups: dict[str, list[tuple[int, str]]],
                truncate_prompts: bool = False, sampling: Sampling | None = None,
                overrides: dict[int, Sampling] | None = None):
        """One batch to ``shard``: its rows as Arrow (each prefix once, its rows after it, with
        their own sampling settings if any), compressed (pipeline/codec.py)."""
        rows = codec.rows_of_groups(groups, overrides.get if overrides else None)
        header = codec.BatchHeader(batch_id=batch_id, truncate_prompts=truncate_prompts, sampling=sampling)
        payload = codec.encode_batch(codec.RowsBatch(header, rows), self.config.intake.compression_level)
        t = self.transfer
        t.batches += 1
        t.encoded_bytes += len(payload)
        t.raw_bytes += codec.raw_size(rows)
        t.per_shard_rows[shard] = t.per_shard_rows.get(shard, 0) + rows.num_rows
        resource = self.config.shard(shard).resource
        return self._client.submit(run_batch, payload, key=batch_id, resources={resource: 1}, pure=False)

