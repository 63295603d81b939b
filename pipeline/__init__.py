"""Batch LLM inference on Dask distributed with a resident vLLM engine per worker."""
from pipeline.client import Pipeline, RowResult
from pipeline.config import Config, ConfigError, load_config
from pipeline.jobs import JobError, JobSummary, prepare_job, run_job

__all__ = ["Pipeline", "RowResult", "Config", "ConfigError", "load_config", "JobError", "JobSummary",
           "prepare_job", "run_job"]
