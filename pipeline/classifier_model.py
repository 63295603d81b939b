"""A sequence-classification model's labels, read from its folder's config.json: such a model
serves task classify from its own head (tasks/classify.py). No pipeline imports: the config's
checks read it too."""

from __future__ import annotations

import json
from pathlib import Path


def classifier_labels(folder: str | None) -> tuple[str, ...] | None:
    """The labels of the sequence-classification model in ``folder`` (its config's architecture ends in
    ``ForSequenceClassification``): its ``id2label`` names in the head's order; None for any other
    model (or no local folder)."""
    try:
        cfg = json.loads((Path(folder) / "config.json").read_text()) if folder else {}
    except (OSError, ValueError):
        return None
    if not any(str(a).endswith("ForSequenceClassification") for a in cfg.get("architectures") or ()):
        return None
    names = {int(k): str(v) for k, v in (cfg.get("id2label") or {}).items()}
    count = max(len(names), int(cfg.get("num_labels") or 0)) or 2
    return tuple(names.get(i, f"LABEL_{i}") for i in range(count))
