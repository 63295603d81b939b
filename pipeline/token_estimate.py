"""Token counts estimated from characters, wherever a text is not tokenized, with one ratio for all."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import numpy as np

CHARS_PER_TOKEN = 4  # English text with the usual BPE tokenizers
Chars = TypeVar("Chars", int, "np.ndarray")  # a count of characters, or an array of counts


def estimated_tokens(chars: Chars) -> Chars:
    """At least one token for ``chars`` characters, or for each count of an array."""
    return chars // CHARS_PER_TOKEN + 1
