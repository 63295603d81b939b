"""A tool_choice "auto" chat line's answer read by vLLM's own tool-call parser for the model's format
(``engine.tool_call_parser``; pipeline/data/chat_tools.py). It runs on the worker because the engine's tokenizer is
there: some parsers look their markers up in it, and refuse a model whose vocabulary lacks them.

A row's parser is built before its request goes to the engine, as vLLM's ``serving_chat`` builds one per request, so
a parser that cannot read this model fails the row without an answer spent.
"""

from __future__ import annotations

import json
from typing import Any


class AutoTools:
    """The parser ``name`` over a row's ``tools`` (JSON text of OpenAI's list of tools)."""

    def __init__(self, name: str, tools: str, tokenizer: Any):
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.tool_parsers import ToolParserManager

        self.request = ChatCompletionRequest(messages=[], tools=json.loads(tools), tool_choice="auto")
        offered: list[Any] = list(self.request.tools or [])
        self.parser = ToolParserManager.get_tool_parser(name)(tokenizer, offered)
        # (in place) a parser whose markers are special tokens asks for them in the text: hermes does
        self.parser.adjust_request(self.request)

    @property
    def keeps_special_tokens(self) -> bool:
        return not self.request.skip_special_tokens

    def read(self, text: str) -> tuple[str, str | None]:
        """The answer's text beside its calls, and the calls as JSON text (``[{"name", "arguments"}]``, arguments
        as the parser wrote them); where it calls none: the whole text and None."""
        found = self.parser.extract_tool_calls(text, self.request)
        if not found.tools_called or not found.tool_calls:
            return text, None
        calls = [{"name": c.function.name, "arguments": c.function.arguments} for c in found.tool_calls]
        return found.content or "", json.dumps(calls, ensure_ascii=False)
