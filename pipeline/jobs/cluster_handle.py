"""What a job needs of the cluster it runs on: ``ClusterHandle``. ``Pipeline``
(pipeline/client/pipeline.py) is one; a job never imports it (the client runs jobs, not the
other way round)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from distributed import Client

    from pipeline.config import Config


class ClusterHandle(Protocol):
    client: "Client"            # the Dask client the job's tasks are submitted with
    config: "Config"            # the cluster's config (a job runs with its own, ``Config.for_job``)
    model: str                  # the engines' model (its folder or hub name)
    tokenizer: Any              # the model's tokenizer, this side (prompt lengths, labels)
    engine_tasks: frozenset[str]   # what every engine serves ("generate", "embed", "classify")
    embedding_size: int | None  # an embedding model's vector size
