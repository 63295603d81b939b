"""Start the shards' engines on a running cluster, as ``Pipeline.start`` and ``python -m
pipeline up`` both do: wait for one worker per shard, register the engine plugin on the
scheduler (Dask installs it on every worker that joins, including one a nanny restarts; each
builds its shard's engine), show each engine's start, and check that every shard is served.
"""

from __future__ import annotations

from typing import Callable

from distributed import Client

from pipeline.cluster.start_progress import StartProgress, one_line
from pipeline.config import Config
from pipeline.names import PLUGIN_NAME
from pipeline.worker.plugin import EnginePlugin
from pipeline.worker.queries import held_prefixes, worker_stats


class EngineStartError(RuntimeError):
    """An engine did not start (e.g. the engine rejected the config); the message says why."""


def wait_for_shard_workers(client: Client, config: Config, timeout_s: float) -> None:
    try:
        client.wait_for_workers(len(config.shards), timeout=timeout_s)
    except TimeoutError:
        raise RuntimeError(
            f"{len(config.shards)} shard workers expected, "
            f"{len(client.scheduler_info()['workers'])} joined within {timeout_s:.0f} s"
        ) from None


def start_engines(
    client: Client,
    config: Config,
    model: str,
    engine_kind: str,
    notify: Callable[[str], None],
    live: Callable[[str], None] | None = None,
    logs: str | None = None,
) -> list[dict]:
    """Build every shard's engine (a no-op where it runs already, for the same settings) and
    return the shards' figures (``worker_stats``). ``logs``: the workers' log folder, named in
    the error when an engine does not start."""
    progress = StartProgress(client, config.shard_names, notify, live)
    try:
        with progress:
            client.register_plugin(EnginePlugin(config, model, engine_kind), name=PLUGIN_NAME)
    except Exception as exc:  # raised in a worker's plugin setup: the engine's build
        # the failed shards in the config's order (their errors come in the order they fail)
        failed = [s for s in config.shard_names if s in progress.errors]
        error = progress.errors[failed[0]] if failed else f"{type(exc).__name__}: {exc}"
        raise EngineStartError(
            f"shard {', '.join(failed) or '?'}: the engine did not start: {one_line(error)}"
            + (f" (the whole error is in the workers' logs, {logs}/)" if logs else "")
        ) from None
    return shard_stats(client, config)


def shard_stats(client: Client, config: Config) -> list[dict]:
    """Each shard's figures from its worker; an error naming any shard no worker serves."""
    stats = [s for s in client.run(worker_stats).values() if s]
    served = {s.get("shard") for s in stats}
    missing = [n for n in config.shard_names if n not in served]
    if missing:
        raise RuntimeError(f"no worker serves shard(s) {', '.join(missing)}; workers report {sorted(map(str, served))}")
    return stats


def held_documents(client: Client, shards) -> dict[int, str]:
    """What the engines of ``shards`` hold from earlier jobs, as their workers remember it:
    prefix digest -> shard (pipeline/prefix_memory.py; bounded by the KV caches)."""
    held: dict[int, str] = {}
    for reply in client.run(held_prefixes, on_error="return").values():
        if isinstance(reply, dict) and reply.get("shard") in shards:
            held.update(dict.fromkeys(reply["prefixes"], reply["shard"]))
    return held
