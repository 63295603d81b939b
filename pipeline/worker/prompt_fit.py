"""Prompts longer than the model's context: an error for the row, or truncation when asked.

vLLM refuses a prompt of ``max_model_len`` tokens or more, since it needs room for one new token. Truncation cuts
the end of the row's shareable prefix and keeps the row's own part whole, leaving room for ``max_tokens`` new
tokens."""

from __future__ import annotations

from pipeline.worker.engine import TokenIds

TOO_LONG = "prompt too long"  # an ErrorKind.INPUT error


def fit_prompt(
    prefix: TokenIds, suffix: TokenIds, max_model_len: int, max_tokens: int, truncate: bool
) -> tuple[TokenIds, str | None]:
    """The prompt's token ids and None, or ``[]`` and the row's error."""
    total = len(prefix) + len(suffix)
    if total < max_model_len:
        return prefix + suffix, None
    context = f"{total} tokens; the model's context (engine.max_model_len) is {max_model_len}"
    if not truncate:
        return [], f"{TOO_LONG} ({context}); shorten it, or ask for truncation (--truncate)"
    target = max(max_model_len - max_tokens, 1) if max_tokens < max_model_len else max_model_len - 1
    keep = target - len(suffix)
    if keep <= 0:
        return [], (
            f"{TOO_LONG} ({context}); the row's own part alone is {len(suffix)} tokens, "
            f"so truncating the shared part cannot make it fit"
        )
    return prefix[:keep] + suffix, None


def fit_text(ids: TokenIds, room: int, truncate: bool) -> tuple[TokenIds, str | None]:
    """A text to embed, without the model's special tokens, cut to ``room`` tokens when asked; or ``[]`` and the
    row's error."""
    if len(ids) <= room:
        return ids, None
    if not truncate:
        return [], (
            f"{TOO_LONG} ({len(ids)} tokens; the embedding model takes {room}); shorten it, or ask for "
            f"truncation (--truncate)"
        )
    return ids[:room], None
