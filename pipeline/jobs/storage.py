"""Where job files live: local paths, or any fsspec URL (``s3://``, ``gs://``, ``memory://``, ...).
A ``file://`` (or ``local://``) URL names a local path and is written like one.

Credentials and endpoints come from the config's ``storage_options`` (passed to fsspec, e.g.
``{endpoint_url: http://127.0.0.1:9000, key: ..., secret: ...}`` for s3fs) or from the
environment the store's library reads (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_ENDPOINT_URL``, ... for S3).
"""
from __future__ import annotations

import os
from typing import Any

from pipeline.jobs.errors import JobError


LOCAL_PREFIXES = ("file://", "local://")   # fsspec's protocols for the local file system


def is_url(spec: str | os.PathLike) -> bool:
    """A URL with a protocol other than the local file system's."""
    text = str(spec)
    return "://" in text and not text.startswith(LOCAL_PREFIXES)


def local_path(spec: str | os.PathLike) -> str:
    """The absolute local path a spec that is not :func:`is_url` names: itself, or a ``file://``
    URL's path (``file:///data/in.parquet``: ``/data/in.parquet``), ``~`` expanded. Absolute
    because a cluster job's workers read and write it from their own working folder (a resident
    cluster's, from ``up``, is not the client's)."""
    text = str(spec)
    for prefix in LOCAL_PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    return os.path.abspath(os.path.expanduser(text))


def filesystem(spec: str, storage_options: dict[str, Any] | None = None):
    """(fsspec file system, path within it) for a URL."""
    import fsspec

    try:
        return fsspec.core.url_to_fs(spec, **(storage_options or {}))
    except (ImportError, ValueError) as exc:   # an unknown protocol, or its package is missing
        raise JobError(f"cannot open {spec}: {exc}") from None


def store_error(exc: BaseException, what: str) -> JobError:
    """One clear line for a failed store operation on ``what`` (a URL)."""
    text = " ".join(str(exc).split())
    name = type(exc).__name__
    if isinstance(exc, PermissionError) or any(s in text for s in ("AccessDenied", "InvalidAccessKeyId",
                                                                     "SignatureDoesNotMatch", "Forbidden")):
        return JobError(f"access to {what} was refused ({text}); check the credentials (the config's "
                        f"storage_options, or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)")
    if "NoSuchBucket" in text or "bucket does not exist" in text.lower():
        return JobError(f"{what}: the bucket does not exist ({text})")
    if isinstance(exc, FileNotFoundError):
        return JobError(f"{what} not found")
    return JobError(f"cannot reach {what}: {name}: {text}")
