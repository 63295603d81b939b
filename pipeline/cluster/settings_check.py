"""What every process of a cluster must agree on with its scheduler, checked where it joins. Where
two ends' compression settings differ, Dask's handshake silently sends raw, so workers and clients
ask the scheduler for its settings and refuse to go on where they differ."""

from __future__ import annotations

from pipeline import compression
from pipeline.cluster.worker_spec import cluster_settings
from pipeline.config import Config


def settings_mismatch(theirs: dict | None, config: Config, them: str, us: str) -> str | None:
    """Why this process cannot join a scheduler whose settings are ``theirs``, or None. A scheduler
    without the pipeline's preload answers None and is not checked."""
    if theirs is None:
        return None
    ours = compression.describe(cluster_settings(config)[compression.SETTING])
    running = compression.describe(theirs.get("compression"))
    if running == ours:
        return None
    return (
        f"network.compression differs: {them} runs {running}, {us} says {ours}. Every host's config must give "
        f"the same value; Dask would send raw between processes that differ"
    )
