"""Start the shards' engines on a running cluster, for ``Pipeline.start`` and ``python -m pipeline up``.
The engine plugin is registered on the scheduler, so Dask installs it on every worker that joins,
including one a nanny restarts."""

from __future__ import annotations

from typing import Callable

from distributed import Client

from pipeline.cluster.start_progress import StartProgress, one_line
from pipeline.config import Config
from pipeline.names import PLUGIN_NAME
from pipeline.worker.plugin import EnginePlugin
from pipeline.worker.queries import held_prefixes, worker_stats


class EngineStartError(RuntimeError):
    """An engine did not start; the message says why."""


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
    """Build every shard's engine, where it does not run already with the same settings, and return
    the shards' ``worker_stats``. ``logs`` is the workers' log folder, named in a start error."""
    progress = StartProgress(client, config.shard_names, notify, live)
    try:
        with progress:
            client.register_plugin(EnginePlugin(config, model, engine_kind), name=PLUGIN_NAME)
    except Exception as exc:  # raised in a worker's plugin setup: the engine's build
        # Name the failed shards in the config's order, not the order they failed in.
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
    """Prefix digest -> shard for what the engines of ``shards`` hold from earlier jobs."""
    held: dict[int, str] = {}
    for reply in client.run(held_prefixes, on_error="return").values():
        if isinstance(reply, dict) and reply.get("shard") in shards:
            held.update(dict.fromkeys(reply["prefixes"], reply["shard"]))
    return held
