"""The shards of a config: each shard's devices, tensor-parallel size and environment, and how
``shards: auto`` lays out a machine (pipeline/config/layout.py)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from pipeline.config.base import Section
from pipeline.engine_env import shard_engine_env
from pipeline.names import SHARD_ENV, shard_resource


class ShardConfig(Section):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    kind: Literal["cpu", "gpu"] = "cpu"
    # CPU: the cores the engine's threads are pinned to. GPU: CUDA device indices; a shard of
    # several GPUs runs its engine tensor-parallel over them. (`device: N` is one device.)
    devices: list[int] = Field(min_length=1)
    # Ranks the engine is split into (vLLM's tensor_parallel_size). Default: a GPU shard's number
    # of GPUs; a CPU shard 1 (its cores are one engine's threads). On CPU each rank is a process
    # pinned to its share of the cores.
    tensor_parallel_size: int | None = Field(None, gt=0)
    env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _one_device(cls, data: Any) -> Any:
        if isinstance(data, dict) and "device" in data:
            if "devices" in data:
                raise ValueError("give device or devices, not both")
            data = {**data, "devices": [data["device"]]}
            del data["device"]
        return data

    @field_validator("devices")
    @classmethod
    def _distinct(cls, devices: list[int]) -> list[int]:
        if any(d < 0 for d in devices):
            raise ValueError("device numbers are 0 or more")
        if len(set(devices)) != len(devices):
            raise ValueError(f"a device is listed twice: {devices}")
        return devices

    @property
    def tensor_parallel(self) -> int:
        if self.tensor_parallel_size is not None:
            return self.tensor_parallel_size
        return len(self.devices) if self.kind == "gpu" else 1

    def worker_env(self) -> dict[str, str]:
        """The shard's variables: its worker's and its engine's (the benchmark's plain vLLM
        reference gets them too): the device pin, the engine's defaults, the shard's ``env``."""
        return {SHARD_ENV: self.name, **shard_engine_env(self.kind, self.devices, self.tensor_parallel, self.env)}

    @property
    def resource(self) -> str:
        return shard_resource(self.name)


class AutoShardsConfig(Section):
    """How ``shards: auto`` lays out this machine (pipeline/config/layout.py)."""

    gpus_per_shard: int = Field(1, gt=0)  # each shard tensor-parallel over this many GPUs
    cpu_cores_per_shard: int | None = Field(None, gt=0)  # null: 1 on machines of up to 4 cores, else 4
    reserve_cores: int | None = Field(None, ge=0)  # null: 1 (for the client and scheduler) above 4 cores, else 0
    env: dict[str, str] = Field(default_factory=dict)  # every auto shard's env
