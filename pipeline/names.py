"""Names that the client, the scheduler, the workers and their engines must agree on. Plain
constants with no imports, so every process can read them cheaply."""

from __future__ import annotations

PLUGIN_NAME = "pipeline-engine"  # the worker plugin that holds the shard's engine
SNAPSHOT_TOPIC = "pipeline-shard"  # scheduler event topic the workers publish figures to
ENGINE_DIED_TOPIC = "pipeline-engine-died"  # scheduler event topic: a worker's engine died
VIEW_METADATA_KEY = "pipeline-view"  # scheduler metadata the client writes for the dashboard page


# Plentiful, because a worker's nthreads bounds its concurrency; a batch asks for 1.
SHARD_RESOURCE_AMOUNT = 1_000_000
# One fewer answer task than a worker's threads, so another job's read, split and merge tasks find a thread.
ANSWER_SLOTS_RESOURCE = "answer-slots"
READ_SLOTS_RESOURCE = "read-slots"  # input partitions a worker reads at once
PUBLISH_INTERVAL_S = 1.0  # how often working workers send their figures to SNAPSHOT_TOPIC


def answer_slots(nthreads: int) -> int:
    return max(1, nthreads - 1)


SHARD_RESOURCE_PREFIX = "shard-"


def shard_resource(name: str) -> str:
    """The Dask worker resource that marks the worker serving shard ``name``."""
    return f"{SHARD_RESOURCE_PREFIX}{name}"


SHARD_ENV = "PIPELINE_SHARD"  # a worker's shard (set by the client or `up`)
LOG_FILE_ENV = "PIPELINE_LOG_FILE"  # a worker's log file, where the preload moves fds 1 and 2
LOG_ENV_ADDED = "PIPELINE_LOG_ENV_ADDED"  # variables set only to quiet a worker's start; the preload drops them
ADDED_RECORD_ENV = "PIPELINE_DASK_ADDED_ENV"  # which variables the nanny added: its engine starts without them
EXIT_WITH_PARENT_ENV = "PIPELINE_EXIT_WITH_PARENT"  # an embedded cluster's scheduler: stop when its client process dies
CLUSTER_DIR_ENV = "PIPELINE_CLUSTER_DIR"  # where `up` records the resident cluster
LOG_DIR_ENV = "PIPELINE_LOG_DIR"  # where the embedded cluster's workers log

# The endpoints an OpenAI batch line may name besides the scoring ones.
CHAT_URL = "/v1/chat/completions"
COMPLETIONS_URL = "/v1/completions"
RESPONSES_URL = "/v1/responses"
EMBEDDINGS_URL = "/v1/embeddings"
ENDPOINTS = (CHAT_URL, COMPLETIONS_URL, RESPONSES_URL, EMBEDDINGS_URL)
SCORE_URL = "/v1/score"  # the scoring endpoints as a batch names them
RERANK_URL = "/v1/rerank"
