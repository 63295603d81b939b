"""The one ``Config`` object, read from a YAML file and checked as a whole.

Validating it reads no file and starts nothing: the model's own settings are read where the model is
loaded. docs/configuration.md is the reference of every key."""

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
