"""OpenAI's objects as the service answers them, and their ids. A stored record is the object
plus the service's own keys, which start with ``_`` and are never shown."""

from __future__ import annotations

import time
import uuid

# the states of a batch that is over
FINAL = ("completed", "failed", "expired", "cancelled")
# the purposes OpenAI's files.create takes; a batch's input must be "batch"
PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
OUTPUT_PURPOSE = "batch_output"


def new_file_id() -> str:
    return f"file-{uuid.uuid4().hex[:24]}"


def new_batch_id() -> str:
    return f"batch_{uuid.uuid4().hex[:24]}"


def shown(record: dict) -> dict:
    """The object a client sees: the record without the service's own keys."""
    return {k: v for k, v in record.items() if not k.startswith("_")}


def file_record(file_id: str, filename: str, purpose: str, size: int, requests: int, endpoint: str | None) -> dict:
    return {
        "id": file_id,
        "object": "file",
        "bytes": size,
        "created_at": int(time.time()),
        "filename": filename,
        "purpose": purpose,
        "status": "processed",
        "expires_at": None,
        "status_details": None,
        "_requests": requests,
        "_endpoint": endpoint,
    }


def batch_record(
    batch_id: str,
    input_file_id: str,
    endpoint: str,
    completion_window: str,
    window_s: int,
    metadata: dict | None,
    total: int,
) -> dict:
    ns = time.time_ns()
    now = ns // 1_000_000_000
    return {
        "id": batch_id,
        "object": "batch",
        "endpoint": endpoint,
        "errors": None,
        "input_file_id": input_file_id,
        "completion_window": completion_window,
        "status": "validating",
        "output_file_id": None,
        "error_file_id": None,
        "created_at": now,
        "in_progress_at": None,
        "expires_at": now + window_s,
        "finalizing_at": None,
        "completed_at": None,
        "failed_at": None,
        "expired_at": None,
        "cancelling_at": None,
        "cancelled_at": None,
        "request_counts": {"total": total, "completed": 0, "failed": 0},
        "usage": None,
        "metadata": metadata,
        "_created_ns": ns,
    }  # _created_ns orders the batches created within one second


def page(objects: list[dict], has_more: bool) -> dict:
    return {
        "object": "list",
        "data": objects,
        "first_id": objects[0]["id"] if objects else None,
        "last_id": objects[-1]["id"] if objects else None,
        "has_more": has_more,
    }
