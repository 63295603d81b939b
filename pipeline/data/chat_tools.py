"""Tools in chat lines (``body.tools``, ``body.tool_choice``), answered as vLLM answers them for any model: by
structured output over the tools' parameter schemas. ``"required"``: a JSON list of one or more ``{"name",
"parameters"}`` calls (vLLM's schema, ``_required``); a named function: that tool's arguments; ``"none"``: a text
answer without the tools; ``"auto"`` (OpenAI's default where tools are given): the model's text, read on the worker
by vLLM's tool-call parser for its format (``engine.tool_call_parser``; pipeline/worker/tool_calls.py), and with no
parser configured the line is an error. An answer that does not match its schema is the line's ``output:`` error;
the output line carries the calls as ``message.tool_calls`` with ``finish_reason`` ``tool_calls``."""

from __future__ import annotations

import json
from typing import Any

from pipeline.data.openai_format import ChatBody, NamedToolChoice

REQUIRED = "required"
# How a line's answer is read. Neither is a function name, since OpenAI's allow letters, digits, _ and - only, so
# a function named "required" stays a named choice.
AUTO, ALL_REQUIRED = "(auto)", "(required)"


def tool_fields(body: ChatBody, parser: str | None = None) -> tuple[dict, str | None]:
    """The row columns a chat body's tools add (``json_schema``, or with "auto" the ``parser``
    that reads the answer; ``tools`` for the chat template and that parser), and None; or {} and
    why the line cannot be answered. ``{}``, None: no tools."""
    choice = body.tool_choice
    if not body.tools or choice == "none":
        if isinstance(choice, NamedToolChoice) or choice in (REQUIRED, "auto"):
            shown = repr(choice) if isinstance(choice, str) else f"function {choice.function.name!r}"
            return {}, f"body.tool_choice {shown} names tools, and body.tools gives none"
        return {}, None
    tools = body.tools
    for i, t in enumerate(tools):
        if t.type != "function":
            return {}, f"body.tools[{i}].type {t.type!r} is not supported (function tools only)"
        if t.function is None:
            return {}, f"body.tools[{i}].function is missing"
    if choice in (None, "auto"):
        if parser is not None:
            return {"tools": [_plain(t) for t in tools], "tool_parser": parser}, None
        return {}, (
            'body.tool_choice "auto" (the default where tools are given) needs a tool-call parser for '
            "the model's output, and none is configured (engine.tool_call_parser, e.g. hermes); set "
            'tool_choice to "required" or a named function, or "none" for a text answer'
        )
    schemas = {
        t.function.name: t.function.parameters or {"type": "object", "properties": {}}
        for t in tools
        if t.function is not None
    }  # (every one: a tool without is refused above)
    if choice == REQUIRED:
        schema: dict[str, Any] = _required(schemas)
    else:
        assert isinstance(choice, NamedToolChoice)
        if choice.function.name not in schemas:
            return {}, f"body.tool_choice names function {choice.function.name!r}, which body.tools does not give"
        schema = schemas[choice.function.name]
    return {"json_schema": schema, "tools": [_plain(t) for t in tools]}, None


def _required(schemas: dict[str, dict]) -> dict:
    """vLLM's schema for ``tool_choice: "required"``: a non-empty list of calls of the tools."""
    return {
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "anyOf": [
                {
                    "properties": {"name": {"type": "string", "enum": [name]}, "parameters": parameters},
                    "required": ["name", "parameters"],
                }
                for name, parameters in schemas.items()
            ],
        },
    }


def _plain(tool) -> dict:
    f = tool.function
    return {
        "type": "function",
        "function": {
            k: v
            for k, v in (("name", f.name), ("description", f.description), ("parameters", f.parameters))
            if v is not None
        },
    }


def tool_mode(request: Any) -> str | None:
    """How a chat line (parsed JSON) is answered: ``ALL_REQUIRED``, ``AUTO`` (the parser's calls, or
    text), the named function's name, or None (as text; a line whose tools fail is an error row
    either way)."""
    body = request.get("body") if isinstance(request, dict) else None
    if not isinstance(body, dict) or not body.get("tools"):
        return None
    choice = body.get("tool_choice")
    if choice == REQUIRED:
        return ALL_REQUIRED
    if choice in (None, "auto"):
        return AUTO
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        return name if isinstance(name, str) else None
    return None


def tool_calls(answer_json: str, mode: str, prefix: str) -> list[tuple[str, str, str]]:
    """An answer's calls as ``(id, name, arguments as JSON text)``: each of a ``required`` answer's
    list, the named function's one, or each the parser read (``AUTO``: its arguments kept as the
    parser wrote them). ``prefix``: what makes the ids unique in the batch."""
    value = json.loads(answer_json)
    if mode == AUTO:
        calls = [(c["name"], c["arguments"]) for c in value]
    else:
        pairs = [(c["name"], c["parameters"]) for c in value] if mode == ALL_REQUIRED else [(mode, value)]
        calls = [(name, json.dumps(arguments, ensure_ascii=False)) for name, arguments in pairs]
    return [(f"call_{prefix}_{i}", name, arguments) for i, (name, arguments) in enumerate(calls)]
