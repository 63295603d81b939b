"""A job's own settings, the sections of the config (pipeline/config/config_file.py) that travel with each
job to the workers, so one running cluster serves jobs with different ones: ``sampling`` and
``prompt``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from pipeline.config.base import Section
from pipeline.sampling import MAX_TOP_LOGPROBS, Sampling, SamplingError, checked, schema_text
from tasks.template import TemplateError, template_columns


class SamplingConfig(Section):
    """The job's sampling settings; input columns of the same names override them per row
    (pipeline/sampling.py). They travel with every job, so one running cluster serves jobs
    with different settings."""

    max_tokens: int = Field(32, gt=0)
    temperature: float = Field(0.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=-1)  # 0 or -1: off
    stop: list[str] | None = None
    seed: int | None = None  # null: engine.seed
    # Structured output (at most one): the answer is JSON matching this schema (a mapping, JSON
    # text, or the path of a .json file), or exactly one of these strings.
    json_schema: dict[str, Any] | str | None = None
    choice: list[str] | None = None
    n: int = Field(1, ge=1)  # answers per row (the prompt prefilled once); >1: a choices column
    logprobs: bool = False  # keep each answer token's log-probability: a logprobs column
    top_logprobs: int = Field(0, ge=0, le=MAX_TOP_LOGPROBS)  # and this many of the likeliest tokens at each place
    # task embed: each embedding scaled to length 1 (true), or as the model's pooling leaves it
    # (false); null: as the model defines (all-MiniLM-L6-v2: normalised)
    normalize: bool | None = None

    @field_validator("json_schema")
    @classmethod
    def _schema(cls, value):
        try:
            return None if value is None else json_schema_value(value)
        except SamplingError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _constraint(self) -> "SamplingConfig":
        if self.json_schema is not None and self.choice is not None:
            raise ValueError("sampling: give json_schema or choice, not both")
        try:
            checked({"stop": self.stop, "choice": self.choice}, "sampling.")
        except SamplingError as exc:
            raise ValueError(str(exc)) from None
        return self

    def as_sampling(self, engine_seed: int):
        """These settings as they travel with a job."""
        return Sampling(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            stop=self.stop,
            seed=engine_seed if self.seed is None else self.seed,
            json_schema=None if self.json_schema is None else schema_text(self.json_schema),
            choice=self.choice,
            n=self.n if self.n > 1 else None,
            logprobs=self.logprobs or None,
            top_logprobs=self.top_logprobs or None,
            normalize=self.normalize,
        )


def json_schema_value(value: dict | str) -> dict:
    """A JSON schema given as a mapping, JSON text, or a .json file's path, as a mapping."""
    if isinstance(value, str) and not value.lstrip().startswith("{"):
        path = Path(value).expanduser()
        try:
            value = path.read_text()
        except OSError as exc:
            raise SamplingError(
                f"sampling.json_schema: cannot read {path} ({exc.strerror or exc}); "
                f"give a .json file or the schema itself"
            ) from None
    return json.loads(schema_text(value, "sampling.json_schema"))


class PromptConfig(Section):
    """The prompt: ``task: template`` renders ``template`` (a user message naming input columns,
    e.g. "Summarize:\n\n{text}") through the model's chat template (tasks/template.py)."""

    system: str | None = None  # a system prompt (document_question, template, generate)
    template: str | None = None  # setting it makes the task "template"
    # The shareable prefix runs through this column's value (null: the first column named).
    prefix_column: str | None = None
    chat_template: bool = True  # false: send the text as written (base models)
    # task classify / score: the answers weighed after the prompt, each by its first token (classify:
    # required; score: default [yes, no], the score being the first's probability)
    labels: list[str] | None = None

    @model_validator(mode="after")
    def _template(self) -> "PromptConfig":
        if self.template is not None:
            try:
                columns = template_columns(self.template)
            except TemplateError as exc:
                raise ValueError(str(exc)) from None
            if self.prefix_column is not None and self.prefix_column not in columns:
                raise ValueError(
                    f"prompt.prefix_column {self.prefix_column!r} is not in the template, "
                    f"which names {', '.join(columns)}"
                )
        return self
