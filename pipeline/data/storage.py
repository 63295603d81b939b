"""Where job files live: local paths or any fsspec URL. Credentials and endpoints come from the config's
``storage_options`` or from the environment the store's library reads."""

from __future__ import annotations

import fnmatch
import os
import posixpath
from typing import Any

from pipeline.data.errors import JobError, one_line

LOCAL_PREFIXES = ("file://", "local://")  # fsspec's protocols for the local file system


def is_url(spec: str | os.PathLike) -> bool:
    """A URL with a protocol other than the local file system's."""
    text = str(spec)
    return "://" in text and not text.startswith(LOCAL_PREFIXES)


def local_path(spec: str | os.PathLike) -> str:
    """The absolute local path a spec names; absolute because the workers resolve it from their own working folder."""
    text = str(spec)
    if text.startswith(LOCAL_PREFIXES):
        text = text.split("://", 1)[1]
    return os.path.abspath(os.path.expanduser(text))


def filesystem(spec: str, storage_options: dict[str, Any] | None = None):
    """(fsspec file system, path within it) for a URL."""
    import fsspec

    try:
        return fsspec.core.url_to_fs(spec, **(storage_options or {}))
    except (ImportError, ValueError) as exc:  # an unknown protocol, or its package is missing
        raise JobError(f"cannot open {spec}: {exc}") from None


def store_error(exc: BaseException, what: str) -> JobError:
    """One clear line for a failed store operation on ``what`` (a URL)."""
    text = one_line(exc)
    if isinstance(exc, PermissionError) or any(
        s in text for s in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden")
    ):
        return JobError(
            f"access to {what} was refused ({text}); check the credentials (the config's "
            f"storage_options, or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
        )
    if "NoSuchBucket" in text or "bucket does not exist" in text.lower():
        return JobError(f"{what}: the bucket does not exist ({text})")
    if isinstance(exc, FileNotFoundError):
        return JobError(f"{what} not found")
    return JobError(f"cannot reach {what}: {type(exc).__name__}: {text}")


def address(spec: str | os.PathLike, storage_options: dict[str, Any] | None = None) -> str:
    """Where a path or URL points, comparable with another's: a local real path or a normalized URL."""
    if not is_url(spec):
        return os.path.realpath(local_path(spec))
    fs, path = filesystem(str(spec), storage_options)
    return address_on(fs, path)


def address_on(fs, path: str) -> str:
    """``address`` of ``path`` on the fsspec file system ``fs``."""
    return fs.unstrip_protocol(posixpath.normpath(fs._strip_protocol(path)))


def inside(path: str, folder: str) -> bool:
    """Whether address ``path`` lies below address ``folder``."""
    return path.startswith(folder.rstrip("/") + "/")


def glob_reaches(pattern: str, path: str, below: bool = False) -> bool:
    """Whether the glob ``pattern`` matches ``path``, or with ``below`` may match something inside it. A path that
    does not exist yet counts, because a file written there later is read by the next run."""
    pat, parts = pattern.split("/"), path.split("/")

    def match(i: int, j: int) -> bool:
        if i == len(pat):
            return j == len(parts)
        if j == len(parts):
            return below or all(p == "**" for p in pat[i:])
        if pat[i] == "**":
            return match(i + 1, j) or match(i, j + 1)
        return fnmatch.fnmatchcase(parts[j], pat[i]) and match(i + 1, j + 1)

    return match(0, 0)
