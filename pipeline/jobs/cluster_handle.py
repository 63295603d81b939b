"""What a job needs of the cluster it runs on: ``ClusterHandle``. ``Pipeline``
(pipeline/client/pipeline.py) is one; a job never imports it (the client runs jobs, not the
other way round)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from distributed import Client

    from pipeline.config import Config


class ClusterHandle(Protocol):
    @property
    def client(self) -> "Client":
        """The Dask client the job's tasks are submitted with."""

    @property
    def config(self) -> "Config":
        """The cluster's config (a job runs with its own, ``Config.for_job``)."""

    @property
    def model(self) -> str:
        """The engines' model (its folder or hub name)."""

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer, this side (prompt lengths, labels)."""

    @property
    def engine_tasks(self) -> frozenset[str]:
        """What every engine serves ("generate", "embed", "classify")."""

    @property
    def embedding_size(self) -> int | None:
        """An embedding model's vector size."""
