"""The config: one ``Config`` object read from a YAML file (``load_config``) and checked as a
whole. Validating it reads no file and starts nothing (the model's own settings are read where
the model is loaded).

- ``config_file``: ``Config`` (the file's top level) and ``load_config`` / ``parse_config``;
- ``base``: what every section shares (``Section``, ``ConfigError``, ``ConfigNote``);
- ``shards``: a shard (``shards:``) and ``auto_shards:``; ``layout``: how ``shards: auto`` lays
  out this machine, and the checks of a layout against it;
- ``job``: a job's own sections (``prompt:``, ``sampling:``); ``template_fields``: a prompt
  template's columns;
- ``tuning``: the ``advanced:`` sections.

docs/configuration.md is the reference of every key."""

from pipeline.config.base import ConfigError, ConfigNote, Section
from pipeline.config.config_file import Config, engine_kind, load_config, parse_config
from pipeline.config.job import PromptConfig, SamplingConfig

__all__ = [
    "Config",
    "ConfigError",
    "ConfigNote",
    "PromptConfig",
    "SamplingConfig",
    "Section",
    "engine_kind",
    "load_config",
    "parse_config",
]
