"""Names that cross processes. The client, the scheduler, the workers and their engines (and
`python -m pipeline up` / `status` / `down`) must agree on these strings: Dask plugin, topic,
metadata and resource names, and the environment variables one process sets for another.
Plain constants, no imports, so every process can read them cheaply."""

from __future__ import annotations

# Dask names
PLUGIN_NAME = "pipeline-engine"  # the worker plugin that holds the shard's engine
SNAPSHOT_TOPIC = "pipeline-shard"  # scheduler event topic the workers publish figures to
ENGINE_DIED_TOPIC = "pipeline-engine-died"  # scheduler event topic: a worker's engine died
VIEW_METADATA_KEY = "pipeline-view"  # scheduler metadata the client writes for the dashboard page


# A worker's shard resource is plentiful: concurrency is bounded by its nthreads; a batch asks 1.
SHARD_RESOURCE_AMOUNT = 1_000_000
# Cluster-job answer tasks a worker runs at once: one thread fewer than it has, so another job's
# read, split and merge tasks always find a thread (pipeline/jobs/cluster_job.py, fair sharing).
ANSWER_SLOTS_RESOURCE = "answer-slots"
# Input partitions a worker reads at a time (a file job's read tasks ask 1; jobs.reads_per_worker).
READ_SLOTS_RESOURCE = "read-slots"
PUBLISH_INTERVAL_S = 1.0  # how often workers send their figures to SNAPSHOT_TOPIC (while they work)


def answer_slots(nthreads: int) -> int:
    return max(1, nthreads - 1)


SHARD_RESOURCE_PREFIX = "shard-"


def shard_resource(name: str) -> str:
    """The Dask worker resource that marks the worker serving shard ``name``."""
    return f"{SHARD_RESOURCE_PREFIX}{name}"


# Environment variables
SHARD_ENV = "PIPELINE_SHARD"  # a worker's shard (set by the client or `up`)
LOG_FILE_ENV = "PIPELINE_LOG_FILE"  # a worker's log file (the preload moves fds 1/2 there)
LOG_ENV_ADDED = "PIPELINE_LOG_ENV_ADDED"  # variables set only to quiet a worker's start; the preload drops them
ADDED_RECORD_ENV = "PIPELINE_DASK_ADDED_ENV"  # which variables the nanny added: its engine starts without them
EXIT_WITH_PARENT_ENV = "PIPELINE_EXIT_WITH_PARENT"  # an embedded cluster's scheduler: stop when its client process dies
CLUSTER_DIR_ENV = "PIPELINE_CLUSTER_DIR"  # where `up` records the resident cluster
LOG_DIR_ENV = "PIPELINE_LOG_DIR"  # where the embedded cluster's workers log

# OpenAI batch JSONL: the endpoints a line's url may name besides the scoring ones (/v1/score,
# /v1/rerank: pipeline/data/scoring_lines.py)
CHAT_URL = "/v1/chat/completions"
COMPLETIONS_URL = "/v1/completions"
RESPONSES_URL = "/v1/responses"
EMBEDDINGS_URL = "/v1/embeddings"
ENDPOINTS = (CHAT_URL, COMPLETIONS_URL, RESPONSES_URL, EMBEDDINGS_URL)
SCORE_URL = "/v1/score"  # the scoring endpoints as a batch (``pipeline serve``) names them
RERANK_URL = "/v1/rerank"
