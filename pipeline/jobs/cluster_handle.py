"""What a job needs of its cluster. ``Pipeline`` is one, but jobs never import it: the client runs jobs."""

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
        """The cluster's config; a job runs with its own, from ``Config.for_job``."""

    @property
    def model(self) -> str:
        """The engines' model, as its folder or hub name."""

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer on the client, for prompt lengths and labels."""

    @property
    def engine_tasks(self) -> frozenset[str]:
        """What every engine serves: generate, embed or classify."""

    @property
    def embedding_size(self) -> int | None:
        """An embedding model's vector size."""
