"""Python API: submit rows, get results back in input order or as they complete.

    from pipeline import Pipeline
    with Pipeline() as p:                      # embedded cluster from cluster.yaml
        for r in p.stream(rows):               # as batches complete
            print(r.id, r.answer)
        results = p.run(rows)                  # in input order
"""
from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Iterator, Mapping

from distributed import Client, as_completed

from pipeline import codec
from pipeline.cluster import connect
from pipeline.config import Config, load_config
from pipeline.model import resolve_model
from pipeline.dispatch import Dispatcher
from pipeline.router import PrefixRouter
from pipeline.worker import PLUGIN_NAME, EnginePlugin, reset_worker, run_batch, worker_stats

RESULT_FIELDS = ("id", "answer", "error", "prompt_tokens", "cached_tokens", "completion_tokens", "shard", "latency_s")


@dataclass
class RowResult:
    index: int            # position of the row in the submitted rows
    id: Any
    answer: str | None
    error: str | None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    shard: str | None = None
    latency_s: float = 0.0

    def as_row(self) -> dict:
        d = asdict(self)
        return {k: d[k] for k in RESULT_FIELDS}


@dataclass
class TransferStats:
    batches: int = 0
    encoded_bytes: int = 0   # compressed task inputs actually shipped
    raw_bytes: int = 0       # the same prompts' text if every row carried its own
    per_shard_rows: dict = field(default_factory=dict)


class Pipeline:
    """A running pipeline: the cluster, one resident engine per shard, the router."""

    def __init__(self, config: Config | str | None = None, *, engine: str = "vllm", client: Client | None = None):
        self.config = config if isinstance(config, Config) else load_config(config)
        self.engine_kind = engine
        self._client = client
        self._cluster = None
        self._owns_client = client is None
        self.transfer = TransferStats()

    # -- life cycle -------------------------------------------------------------
    def start(self) -> "Pipeline":
        from tasks import get_task_kind

        self.model = resolve_model(self.config) if self.engine_kind == "vllm" or self.config.model.path is None \
            else self.config.model.path
        self.tokenizer = _load_tokenizer(self.model)
        self.task = get_task_kind(self.config.task, self.tokenizer)
        if self._client is None:
            self._client, self._cluster = connect(self.config)
        self._client.wait_for_workers(len(self.config.shards))
        self._client.register_plugin(EnginePlugin(self.config, self.model, self.engine_kind), name=PLUGIN_NAME)
        stats = self._check_shards()
        self.router = self.new_router(self.config.routing.block_size or min(s["block_size"] for s in stats))
        kv_share = self.config.intake.kv_budget_share
        self.token_budget = {s["shard"]: kv_share * s["kv_cache_tokens"] for s in stats
                             if s.get("kv_cache_tokens") and kv_share}
        return self

    def new_router(self, block_size: int | None = None) -> PrefixRouter:
        """A fresh router with this pipeline's settings (and its block size unless given)."""
        block_size = block_size or self.router.block_size
        r = self.config.routing
        return PrefixRouter(self.config.shard_names, block_size, r.max_blocks, r.decode_weight,
                            r.min_match, r.imbalance_abs, r.imbalance_ratio)

    def _check_shards(self) -> list[dict]:
        stats = self.worker_stats()
        served = {s.get("shard") for s in stats}
        missing = [n for n in self.config.shard_names if n not in served]
        if missing:
            raise RuntimeError(f"no worker serves shard(s) {', '.join(missing)}; workers report {sorted(map(str, served))}")
        return stats

    def close(self) -> None:
        if self._client is not None and self._owns_client:
            self._client.close()
        if self._cluster is not None:
            self._cluster.close()
        self._client = self._cluster = None

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
        self.transfer = TransferStats()

    # -- submission -------------------------------------------------------------
    def run(self, rows: Iterable[Mapping[str, Any]]) -> list[RowResult]:
        """Results in input order, one per row."""
        out = sorted(self.stream(rows), key=lambda r: r.index)
        return out

    def stream(self, rows: Iterable[Mapping[str, Any]], *, task=None,
               truncate_prompts: bool = False) -> Iterator[RowResult]:
        """Results as their batches complete (not in input order); one per row.

        ``rows`` may be any iterable: at most ``intake.read_ahead_rows`` rows wait unbound at
        a time (a document's questions are grouped within that window), so memory stays
        bounded however long the input is. ``task``: a task kind other than the configured
        one (e.g. ``tasks.Chat``); ``truncate_prompts``: cut prompts longer than the model's
        context instead of answering them with an error."""
        source = enumerate(rows)
        ids: dict[int, Any] = {}
        dispatcher = self._dispatcher(late_binding=self.config.routing.late_binding)
        window = self.config.intake.read_ahead_rows
        running = as_completed()
        exhausted = False

        def read_ahead() -> list[RowResult]:
            nonlocal exhausted
            chunk = []
            while not exhausted and dispatcher.pending_rows + len(chunk) < window:
                item = next(source, None)
                if item is None:
                    exhausted = True
                else:
                    chunk.append(item)
                    ids[item[0]] = item[1].get("id", item[0])
            failed = [RowResult(index=i, id=ids.pop(i), answer=None, error=f"input: {error}")
                      for i, error in self._queue(chunk, dispatcher, task)]
            for shard, groups in dispatcher.bind():
                running.add(self._submit(shard, groups, truncate_prompts))
            return failed

        yield from read_ahead()
        while not running.is_empty() or not exhausted:
            if running.is_empty():
                yield from read_ahead()
                continue
            fut = next(running)
            result = codec.decode_result(fut.result())
            fut.release()
            dispatcher.completed([r.index for r in result.results])
            yield from read_ahead()
            for r in result.results:
                yield RowResult(index=r.index, id=ids.pop(r.index), answer=r.answer, error=r.error,
                                prompt_tokens=r.prompt_tokens, cached_tokens=r.cached_tokens,
                                completion_tokens=r.completion_tokens, shard=r.shard, latency_s=r.latency_s)

    def static_assignment(self, rows: list[Mapping[str, Any]]) -> dict[str, list[int]]:
        """Row indices per shard as this pipeline's router splits them when every row is bound
        up front (what a client doing the same routing without late binding would send)."""
        dispatcher = self._dispatcher(late_binding=False, router=self.new_router())
        self._queue(list(enumerate(rows)), dispatcher)
        out: dict[str, list[int]] = {s: [] for s in self.config.shard_names}
        for shard, groups in dispatcher.bind():
            out[shard] += [i for items in groups.values() for i, _ in items]
        return out

    def _dispatcher(self, late_binding: bool, router: PrefixRouter | None = None) -> Dispatcher:
        intake = self.config.intake
        return Dispatcher(router or self.router, intake.batch_size, intake.queue_per_shard,
                          decode_tokens=self.config.sampling.max_tokens, late_binding=late_binding,
                          group=self.config.routing.group_by_prefix, token_budget=self.token_budget)

    def _queue(self, rows: list[tuple[int, Mapping[str, Any]]], dispatcher: Dispatcher,
               task=None) -> list[tuple[int, str]]:
        """Split (index, row) pairs into prompt parts and queue them; returns (index, error) for
        rows that cannot be sent."""
        from tasks import RowError

        errors, parts = [], []
        for i, row in rows:
            try:
                parts.append((i, (task or self.task).split(row)))
            except RowError as exc:
                errors.append((i, str(exc)))
        # Each distinct prefix is tokenized once, all in one call (the fast tokenizer batches it).
        unique = list(dict.fromkeys(p.prefix for _, p in parts))
        encoded = self.tokenizer(unique, add_special_tokens=False)["input_ids"] if unique else []
        tokens = dict(zip(unique, encoded))
        for i, p in parts:
            dispatcher.add(i, p.prefix, p.suffix, tokens[p.prefix])
        return errors

    def _submit(self, shard: str, groups: dict[str, list[tuple[int, str]]], truncate_prompts: bool = False):
        batch = _batch(groups)
        batch.truncate_prompts = truncate_prompts
        payload = codec.encode(batch, self.config.intake.compression_level)
        t = self.transfer
        t.batches += 1
        t.encoded_bytes += len(payload)
        t.raw_bytes += codec.raw_size(batch)
        t.per_shard_rows[shard] = t.per_shard_rows.get(shard, 0) + len(batch.requests)
        resource = self.config.shards[self.config.shard_names.index(shard)].resource
        return self._client.submit(run_batch, payload, key=batch.batch_id, resources={resource: 1}, pure=False)


def _batch(groups: dict[str, list[tuple[int, str]]]) -> codec.Batch:
    """One batch: each prefix once, its requests pointing at it."""
    requests = [codec.Request(index=i, prefix=slot, suffix=suffix)
                for slot, items in enumerate(groups.values()) for i, suffix in items]
    return codec.Batch(batch_id=f"pipeline-batch-{uuid.uuid4().hex}", prefixes=list(groups), requests=requests)


def _load_tokenizer(model: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model)
