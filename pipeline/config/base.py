"""What every config section shares: unknown keys refused, values frozen, and its errors and notes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """A config file that cannot be used; the message says why and where."""


class ConfigNote(FutureWarning):
    """A value spelled the old way is accepted, with a note saying what to write instead."""


class Section(BaseModel):
    """A section of the config."""

    model_config = ConfigDict(extra="forbid", frozen=True)
