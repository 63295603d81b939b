"""Chat: OpenAI-style messages rendered with the model's chat template. The shareable prefix is the
conversation before the last user message, so rows that continue one conversation land together;
a single-turn chat has nothing earlier to share, so each distinct message is its own group."""

from __future__ import annotations

from typing import Any, Mapping

from tasks.base import PromptParts, RowError

_MARK = "\ue000SPLIT\ue000"  # private-use sentinel, never in real text
ROLES = ("system", "developer", "user", "assistant")


class Chat:
    name = "chat"
    required_columns: tuple[str, ...] = ("messages",)

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def split(self, row: Mapping[str, Any]) -> PromptParts:
        messages = _messages(row.get("messages"))
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        last = users[-1]
        if len(users) > 1:  # split before the last user message's text
            marked = {**messages[last], "content": _MARK + messages[last]["content"]}
        else:  # split after the only user message's text
            marked = {**messages[last], "content": messages[last]["content"] + _MARK}
        tools = {"tools": row["tools"]} if row.get("tools") else {}  # (a chat line's tools, for the template)
        try:
            rendered = self.tokenizer.apply_chat_template(
                messages[:last] + [marked] + messages[last + 1 :], tokenize=False, add_generation_prompt=True, **tools
            )
        except Exception as exc:  # a template may reject some role orders
            raise RowError(f"messages rejected by the model's chat template: {exc}") from None
        prefix, sep, suffix = rendered.partition(_MARK)
        if not sep or _MARK in suffix:  # the template rewrote the text: no split, whole prompt
            return PromptParts(prefix=rendered.replace(_MARK, ""), suffix="")
        return PromptParts(prefix=prefix, suffix=suffix)


def _messages(value: Any) -> list[dict]:
    if value is None:
        raise RowError("messages is missing")
    if not isinstance(value, list) or not value:
        raise RowError("messages must be a non-empty list")
    out = []
    for n, m in enumerate(value):
        if not isinstance(m, Mapping):
            raise RowError(f"messages[{n}] is not an object")
        role = m.get("role")
        if role not in ROLES:
            raise RowError(f"messages[{n}].role must be one of {', '.join(ROLES)} (got {role!r})")
        out.append({"role": role, "content": _content(m.get("content"), n)})
    if not any(m["role"] == "user" for m in out):
        raise RowError("messages has no user message")
    return out


def _content(value: Any, n: int) -> str:
    """Text content given as a string or as a list of ``{"type": "text", "text": ...}`` parts."""
    if isinstance(value, list):
        texts = []
        for part in value:
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RowError(f"messages[{n}].content: only text parts are supported")
            texts.append(part["text"])
        value = "".join(texts)
    if value is None:
        raise RowError(f"messages[{n}].content is null")
    if not isinstance(value, str):
        raise RowError(f"messages[{n}].content is not text (got {type(value).__name__})")
    if _MARK in value:
        raise RowError(f"messages[{n}].content holds a reserved character")
    return value
