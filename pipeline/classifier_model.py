"""A sequence-classification model's labels, read from its config.json. It imports nothing of the
pipeline because the config's checks read it too."""

from __future__ import annotations

import json
from pathlib import Path


def classifier_labels(folder: str | None) -> tuple[str, ...] | None:
    """The ``id2label`` names of the classification model in ``folder``, in the head's order; else None."""
    try:
        cfg = json.loads((Path(folder) / "config.json").read_text()) if folder else {}
    except (OSError, ValueError):
        return None
    if not any(str(a).endswith("ForSequenceClassification") for a in cfg.get("architectures") or ()):
        return None
    names = {int(k): str(v) for k, v in (cfg.get("id2label") or {}).items()}
    count = max(len(names), int(cfg.get("num_labels") or 0)) or 2
    return tuple(names.get(i, f"LABEL_{i}") for i in range(count))
