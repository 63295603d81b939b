"""Sampling settings as they travel from the client to the workers, and their checks.

A job's settings go with every batch, and a row may override any of them through input columns
of the same names. The client checks each row's values, so a bad value becomes that row's error
with the reason, and the worker lays a row's settings over its job's."""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Any, Mapping

import msgspec

# Input columns that override the job's sampling settings for their row; null keeps the job's.
ROW_COLUMNS = (
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop",
    "seed",
    "json_schema",
    "choice",
    "n",
    "logprobs",
    "top_logprobs",
    "adapter",
    "tools",
    "tool_parser",
)
# Row settings only an OpenAI batch chat line's tools set, never a table's column of the same name.
REQUEST_COLUMNS = ("tools", "tool_parser")
# vLLM's default ``max_logprobs``, and OpenAI's limit too.
MAX_TOP_LOGPROBS = 20


class Sampling(msgspec.Struct, omit_defaults=True, frozen=True, gc=False):
    """Unset fields (None) fall back to the job's settings, then to the engine's defaults."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: list[str] | None = None
    seed: int | None = None
    json_schema: str | None = None  # JSON text of a JSON schema: the answer is JSON matching it
    choice: list[str] | None = None  # the answer is exactly one of these
    n: int | None = None  # answers per row, the prompt prefilled once
    logprobs: bool | None = None  # keep each answer token's log-probability
    top_logprobs: int | None = None  # and this many of the likeliest tokens at each place
    normalize: bool | None = None  # an embedding scaled to length 1; None: as the model defines
    strip: bool | None = None  # None strips; a completion is False, keeping the space that continues its prompt
    adapter: str | None = None  # a LoRA adapter: a name in model.adapters, a path or a URL
    tools: str | None = None  # JSON text of the tools a tool_choice "auto" answer may call
    tool_parser: str | None = None  # the vLLM tool-call parser that reads such an answer's calls
    keep_special_tokens: bool | None = None  # kept in the answer's text, where the parser looks for its markers

    @property
    def choices(self) -> int:
        return self.n or 1

    @property
    def keeps_logprobs(self) -> bool:
        """``top_logprobs`` alone asks for log-probabilities too, as it has no use without them."""
        return bool(self.logprobs) or bool(self.top_logprobs)

    def over(self, base: "Sampling | None") -> "Sampling":
        """A row's settings over its job's; a row's constraint replaces the job's."""
        if base is None:
            return self
        fields = {f: getattr(base, f) for f in self.__struct_fields__}
        fields.update({f: getattr(self, f) for f in self.__struct_fields__ if getattr(self, f) is not None})
        if self.json_schema is not None or self.choice is not None:
            fields["json_schema"], fields["choice"] = self.json_schema, self.choice
        return Sampling(**fields)


class SamplingError(ValueError):
    """A sampling value that cannot be used; the message says which and why."""


def checked(values: Mapping[str, Any], where: str = "") -> Sampling | None:
    """The checked sampling settings among ``values``, or None when none is set. Raises SamplingError
    naming the first bad one, prefixed with ``where``."""
    out: dict[str, Any] = {}
    for name in ROW_COLUMNS:
        value = values.get(name)
        if value is None:
            continue
        out[name] = _CHECKS[name](value, where + name)
    if not out:
        return None
    if "json_schema" in out and "choice" in out:
        raise SamplingError(f"{where}json_schema and {where}choice are both set; give one constraint")
    return Sampling(**out)


def _bad(name: str, rule: str, value: Any) -> SamplingError:
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return SamplingError(f"{name} must be {rule} (got {shown})")


def _int(value: Any, name: str, low: int, rule: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _bad(name, rule, value)
    return value


def _number(value: Any, name: str, ok, rule: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not ok(value):
        raise _bad(name, rule, value)
    return float(value)


def _stop(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(s, str) and s for s in value):
        raise _bad(name, "a non-empty string or a list of them", value)
    return list(value)


def _choice(value: Any, name: str) -> list[str]:
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(s, str) and s for s in value):
        raise _bad(name, "a non-empty list of non-empty strings", value)
    return list(value)


def schema_text(value: Any, name: str = "json_schema") -> str:
    """A JSON schema given as a mapping or as JSON text, checked, as compact JSON text."""
    if isinstance(value, str):
        return _schema_of_text(value, name)
    return _schema_of(value, name)


@lru_cache(maxsize=256)
def _schema_of_text(text: str, name: str) -> str:
    """Cached, because a per-row schema column usually repeats a few schemas."""
    return _schema_of(_parsed(text, name), name)


def _parsed(text: str, name: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SamplingError(f"{name} is not valid JSON ({exc.msg} at position {exc.pos})") from None


def _schema_of(value: Any, name: str) -> str:
    if not isinstance(value, dict):
        raise _bad(name, "a JSON schema (a JSON object)", value)
    from jsonschema import Draft202012Validator, SchemaError

    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as exc:
        raise SamplingError(f"{name} is not a valid JSON schema: {exc.message}") from None
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise _bad(name, "true or false", value)
    return value


def _top(value: Any, name: str) -> int:
    value = _int(value, name, 0, f"an integer from 0 to {MAX_TOP_LOGPROBS}")
    if value > MAX_TOP_LOGPROBS:
        raise _bad(name, f"an integer from 0 to {MAX_TOP_LOGPROBS}", value)
    return value


def _adapter(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _bad(name, "an adapter's name (model.adapters), path or URL", value)
    return value


def _tools(value: Any, name: str) -> str:
    """A list of tools (or it as JSON text) as compact JSON text."""
    if isinstance(value, str):
        return _tools_of_text(value, name)
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise _bad(name, "a list of tools", value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@lru_cache(maxsize=64)
def _tools_of_text(text: str, name: str) -> str:
    """Cached, because a file's lines usually repeat a few tool lists."""
    return _tools(_parsed(text, name), name)


def _name(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise _bad(name, "a non-empty string", value)
    return value


_CHECKS = {
    "max_tokens": lambda v, n: _int(v, n, 1, "an integer >= 1"),
    "temperature": lambda v, n: _number(v, n, lambda x: x >= 0, "a number >= 0"),
    "top_p": lambda v, n: _number(v, n, lambda x: 0 < x <= 1, "a number in (0, 1]"),
    "top_k": lambda v, n: _int(v, n, -1, "an integer >= -1 (0 or -1: off)"),
    "stop": _stop,
    "seed": lambda v, n: _int(v, n, -(2**63), "an integer"),
    "json_schema": schema_text,
    "choice": _choice,
    "n": lambda v, n: _int(v, n, 1, "an integer >= 1"),
    "logprobs": _flag,
    "top_logprobs": _top,
    "adapter": _adapter,
    "tools": _tools,
    "tool_parser": _name,
}


def check_answer(answer: str, sampling: Sampling, stopped_at_limit: bool) -> tuple[str | None, str | None]:
    """For a JSON-schema answer, (compact JSON, None) or (None, why it does not match); else (None, None)."""
    if sampling.json_schema is None:
        return None, None
    cut = " (the answer stopped at max_tokens; raise max_tokens)" if stopped_at_limit else ""
    try:
        value = json.loads(answer)
    except json.JSONDecodeError as exc:
        return None, f"answer is not valid JSON ({exc.msg} at position {exc.pos}){cut}"
    error = next(iter(_validator(sampling.json_schema).iter_errors(value)), None)
    if error is not None:
        return None, f"answer does not match the JSON schema: {error.message}{cut}"
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False), None


@lru_cache(maxsize=256)
def _validator(schema: str):
    from jsonschema import Draft202012Validator

    return Draft202012Validator(json.loads(schema))
