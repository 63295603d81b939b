"""Which shard a worker started with ``--shard auto`` serves, decided at the scheduler.

Identical workers, such as a Slurm job's, cannot know their shard from their command line, so each asks the
scheduler before it starts. A claim holds for ``CLAIM_TTL_S``, long enough for the worker to register with the
shard's resource; after that the live workers' resources alone decide. Claims run on the scheduler's event loop one
at a time, so two workers never get the same shard."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from distributed.protocol.compression import get_compression_settings

from pipeline.names import shard_resource

CLAIM_TTL_S = 180.0
CLAIM_HANDLER = "pipeline_claim_shard"
SETTINGS_HANDLER = "pipeline_settings"


@dataclass
class Claims:
    """Shards promised to workers that have not registered yet: shard -> (claimant, expiry)."""

    held: dict[str, tuple[str, float]] = field(default_factory=dict)

    def live(self, now: float) -> dict[str, str]:
        self.held = {s: (who, until) for s, (who, until) in self.held.items() if until > now}
        return {s: who for s, (who, _) in self.held.items()}


def choose_shard(
    candidates: list[str], served: set[str], claimed: dict[str, str], claimant: str, prefer: str | None = None
) -> str | None:
    """``prefer`` where it is free, so a worker rejoining after a network cut takes its shard back, else the first
    free shard in config order; None when all are taken."""

    def free(name: str) -> bool:
        return name not in served and claimed.get(name, claimant) == claimant

    if prefer in candidates and free(prefer):
        return prefer
    return next((name for name in candidates if free(name)), None)


def install(scheduler) -> None:
    """Adds the claim and settings handlers to the scheduler."""
    claims = Claims()

    def claim(comm=None, candidates=(), claimant: str = "", prefer: str | None = None) -> str | None:
        now, names = time.monotonic(), list(candidates)
        served = {n for ws in scheduler.workers.values() for n in names if shard_resource(n) in (ws.resources or {})}
        chosen = choose_shard(names, served, claims.live(now), claimant, prefer)
        if chosen is not None:
            claims.held = {s: c for s, c in claims.held.items() if c[0] != claimant}
            claims.held[chosen] = (claimant, now + CLAIM_TTL_S)
        return chosen

    def settings(comm=None) -> dict:
        """What a worker or client must agree on with this scheduler."""
        return {"compression": get_compression_settings("distributed.comm.compression")}

    scheduler.handlers[CLAIM_HANDLER] = claim
    scheduler.handlers[SETTINGS_HANDLER] = settings
