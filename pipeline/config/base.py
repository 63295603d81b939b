"""What every part of the config (pipeline/config/config_file.py, pipeline/config/job.py) shares: the
sections' base (unknown keys refused, values frozen) and the errors and notes it raises."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """A config file that cannot be used; the message says why and where."""


class ConfigNote(FutureWarning):
    """A config value spelled the old way: accepted, with a note saying what to write instead
    (the command line prints it as one ``note:`` line)."""


class Section(BaseModel):
    """A section of the config."""

    model_config = ConfigDict(extra="forbid", frozen=True)
