"""The service's store: a local folder that holds everything a restarted service needs::

    STORE/files/<file id>.jsonl       a file's content
    STORE/files/<file id>.json        its record
    STORE/batches/<batch id>.json     a batch's record
    STORE/batches/<batch id>/         its job's output

Every record and file is written under a temporary name and renamed, so a killed service leaves only whole ones."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from pathlib import Path
from typing import BinaryIO

from pipeline.service.errors import invalid, not_found
from pipeline.service.objects import file_record

TMP = ".tmp-"
CHUNK = 1 << 20


class Store:
    def __init__(self, root: str | os.PathLike, max_bytes: int, max_requests: int):
        self.root = Path(root).expanduser().absolute()
        self.max_bytes, self.max_requests = max_bytes, max_requests
        self.files_dir, self.batches_dir = self.root / "files", self.root / "batches"
        for d in (self.files_dir, self.batches_dir):
            d.mkdir(parents=True, exist_ok=True)
            for left in d.glob(f"{TMP}*"):  # a write the last service did not finish
                left.unlink()
        self._lock = threading.Lock()

    def add_file(self, file_id: str, filename: str, purpose: str, content: BinaryIO) -> dict:
        """Stores an upload, refusing one over ``max_bytes`` or a batch input of over ``max_requests`` requests."""
        tmp = self.files_dir / f"{TMP}{file_id}.jsonl"
        size = 0
        try:
            with open(tmp, "wb") as out:
                while chunk := content.read(CHUNK):
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise invalid(
                            f"File is too large: the limit is {self.max_bytes} bytes.",
                            param="file",
                            code="file_too_large",
                        )
                    out.write(chunk)
            requests, endpoint = count_requests(tmp) if purpose == "batch" else (0, None)
            if requests > self.max_requests:
                raise invalid(
                    f"File has {requests} requests; a batch takes at most {self.max_requests}.",
                    param="file",
                    code="too_many_requests",
                )
            os.replace(tmp, self.content_path(file_id))
        finally:
            tmp.unlink(missing_ok=True)
        record = file_record(file_id, filename, purpose, size, requests, endpoint)
        self._write_json(self.files_dir / f"{file_id}.json", record)
        return record

    def add_written_file(self, file_id: str, filename: str, purpose: str, written: Path) -> dict:
        """Moves a file the service wrote itself, a batch's output or errors, into the store."""
        os.replace(written, self.content_path(file_id))
        record = file_record(file_id, filename, purpose, self.content_path(file_id).stat().st_size, 0, None)
        self._write_json(self.files_dir / f"{file_id}.json", record)
        return record

    def file(self, file_id: str, param: str | None = None) -> dict:
        record = _read_json(self.files_dir / f"{file_id}.json") if _plain(file_id) else None
        if record is None:
            raise not_found("file", file_id, param)
        return record

    def files(self) -> list[dict]:
        return sorted(_records(self.files_dir), key=lambda r: (r["created_at"], r["id"]))

    def content_path(self, file_id: str) -> Path:
        return self.files_dir / f"{file_id}.jsonl"

    def delete_file(self, file_id: str) -> None:
        self.file(file_id)
        (self.files_dir / f"{file_id}.json").unlink(missing_ok=True)
        self.content_path(file_id).unlink(missing_ok=True)

    def temporary(self, name: str) -> Path:
        """A path for a file being written, removed if the service stops before it is stored."""
        return self.files_dir / f"{TMP}{name}"

    def save_batch(self, record: dict) -> None:
        self._write_json(self.batches_dir / f"{record['id']}.json", record)

    def batches(self) -> list[dict]:
        return _records(self.batches_dir)

    def job_output(self, batch_id: str) -> Path:
        """Where the batch's job writes its output; OUTPUT.partial/ sits beside it while the job runs."""
        folder = self.batches_dir / batch_id
        folder.mkdir(exist_ok=True)
        return folder / "output.jsonl"

    def drop_job_output(self, batch_id: str) -> None:
        shutil.rmtree(self.batches_dir / batch_id, ignore_errors=True)

    def _write_json(self, path: Path, record: dict) -> None:
        tmp = path.with_name(f"{TMP}{path.name}.{threading.get_ident()}")
        tmp.write_text(json.dumps(record))
        with self._lock:  # the last write wins, whole
            os.replace(tmp, path)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):  # missing, or a name the file system refuses
        return None


def _records(folder: Path) -> list[dict]:
    return [r for r in map(_read_json, folder.glob("*.json")) if r is not None]


def default_root(config) -> Path:
    return config.model.cache_path / "service"


def stored_batches(root: str | os.PathLike) -> list[dict]:
    """The batches' records at ``root``, newest first, read without opening, creating or cleaning the store."""
    return sorted(_records(Path(root).expanduser() / "batches"), key=lambda r: r.get("_created_ns", 0), reverse=True)


def count_requests(path: Path) -> tuple[int, str | None]:
    """A batch input file's non-blank lines and its first line's ``url``; a line's own faults are the job's to
    answer."""
    requests, endpoint = 0, None
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            if requests == 0:
                try:
                    first = json.loads(line)
                    endpoint = first.get("url") if isinstance(first, dict) else None
                except ValueError:
                    endpoint = None
            requests += 1
    return requests, endpoint if isinstance(endpoint, str) else None


ID_CHARACTERS = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")  # the ids the store gives out, and OpenAI's


def _plain(object_id: str) -> bool:
    """Whether an id could name a file of the store and nothing else, so a path or an overlong id is not found."""
    return ID_CHARACTERS.fullmatch(object_id) is not None
