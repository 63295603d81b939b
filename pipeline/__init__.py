"""Batch LLM inference on Dask distributed with a resident vLLM engine per worker.

The exports load on first use, so a process that imports one small module of the package does
not import Dask and pyarrow."""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Pipeline": "pipeline.client.pipeline",
    "RowResult": "pipeline.results",
    "Config": "pipeline.config",
    "ConfigError": "pipeline.config",
    "load_config": "pipeline.config",
    "JobError": "pipeline.data.errors",
    "JobSummary": "pipeline.summary",
    "prepare_job": "pipeline.jobs.job",
    "run_job": "pipeline.jobs.job",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
