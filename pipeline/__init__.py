"""Batch LLM inference on Dask distributed with a resident vLLM engine per worker."""
from pipeline.client import Pipeline, RowResult
from pipeline.config import Config, ConfigError, load_config

__all__ = ["Pipeline", "RowResult", "Config", "ConfigError", "load_config"]
