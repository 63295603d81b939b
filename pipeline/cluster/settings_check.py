"""What every process of a cluster must agree on with its scheduler, checked where it joins.

Dask settles a connection's compression in a handshake: where the two ends' settings differ it
silently sends raw. Across hosts that would leave the study's compressed inputs off without a
word, so a worker (``python -m pipeline worker``) and a client (``Pipeline`` with
``scheduler.address``) ask the scheduler for its settings (the ``pipeline_settings`` handler of
pipeline/scheduler/shard_claims.py) and refuse to go on where they differ.
"""

from __future__ import annotations

from pipeline import compression
from pipeline.cluster.worker_spec import cluster_settings
from pipeline.config import Config


def settings_mismatch(theirs: dict | None, config: Config, them: str, us: str) -> str | None:
    """Why this process cannot join a scheduler whose settings are ``theirs``, or None. A
    scheduler without the pipeline's preload answers the question with None (Dask replies None to
    an operation it has no handler for): it cannot say, and is not checked."""
    if theirs is None:
        return None
    ours = cluster_settings(config)[compression.SETTING]
    if compression.describe(theirs.get("compression")) == compression.describe(ours):
        return None
    return (
        f"network.compression differs: {them} runs {compression.describe(theirs.get('compression'))}, "
        f"{us} says {compression.describe(ours)}. Every host's config must give the same value; Dask would "
        f"send raw between processes that differ"
    )
