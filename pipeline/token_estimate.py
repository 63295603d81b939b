"""Token counts estimated from characters, where a text is not tokenized: a row's question on
its way to a shard (the client's dispatch, a shard's grouped admission) and a document's
expected answer in a cluster job's placement. One ratio for all of them."""
from __future__ import annotations

CHARS_PER_TOKEN = 4   # English text with the usual BPE tokenizers


def estimated_tokens(chars: int) -> int:
    """At least one token for ``chars`` characters of text."""
    return chars // CHARS_PER_TOKEN + 1
