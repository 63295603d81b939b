"""Job output on an object store (``s3://``, ``gs://``, ``memory://``, ... through fsspec),
committed by a manifest instead of by renames.

A local job commits each part by writing it under a temporary name and renaming it
(pipeline/jobs/output.py): a rename is atomic there. An object store has no rename (S3's is a copy
and a delete: a killed job can leave half of it), but it does write each object whole or not at
all. So here each part is written once under its final name, ``OUTPUT.partial/part-000000.parquet``
(or ``.jsonl``), and then the manifest ``OUTPUT.partial/_job.json`` is written again, listing the
parts committed so far and their rows: the manifest is the commit. A part written but not yet
listed (the job was killed in between) is not committed; resuming writes it again. At the end
the parts are copied, one at a time, into OUTPUT (an object that appears whole when its upload
completes), and the folder is removed.
"""
from __future__ import annotations

import io
import json
import time
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.jobs.errors import JobError
from pipeline.jobs.output import meta_differences
from pipeline.jobs.storage import filesystem, store_error

MANIFEST = "_job.json"


class StoreParts:
    """Parquet parts (``schema`` given) or JSONL line parts (``schema`` None) on an object store."""

    def __init__(self, url: str, meta: dict, schema: pa.Schema | None = None, storage_options: dict | None = None):
        self.fs, self.final = filesystem(url, storage_options)
        self.url = url
        self.dir = url + ".partial"            # for messages: the URL
        self._dir = self.final + ".partial"    # within the file system
        self.meta = meta
        self.schema = schema
        self.suffix = ".parquet" if schema is not None else ".jsonl"
        self.parts: list[dict] = []            # committed: {"name", "rows"}
        self.committed = self.resumed = 0
        self._last_commit = time.monotonic()

    # -- start / resume ------------------------------------------------------------------
    def open(self) -> int:
        """Check the store can be written; take up the manifest a previous run left. The rows
        it lists as committed."""
        manifest = self._read_manifest()
        if manifest is None:
            self._probe()
            self._write_manifest()
            return 0
        old = manifest.get("meta", {})
        diff = meta_differences(old, self.meta, ("started",))
        parts = manifest.get("parts", [])
        if diff and parts:
            raise JobError(f"{self.dir} holds partial results of another job (different {diff}); run the original "
                           f"command again to finish it, or delete it to start over")
        if not diff:
            self.meta = old   # keeps the first run's start time
            self.parts = parts
        self._write_manifest()
        self.committed = self.resumed = sum(p["rows"] for p in self.parts)
        return self.committed

    def _read_manifest(self) -> dict | None:
        path = f"{self._dir}/{MANIFEST}"
        try:
            return json.loads(self.fs.cat_file(path))
        except FileNotFoundError:
            return None
        except ValueError:
            raise JobError(f"{self.dir} exists but is not a partial output of this program "
                           f"(unreadable {MANIFEST}); delete it") from None
        except Exception as exc:  # noqa: BLE001 - credentials, bucket, network
            raise store_error(exc, self.url) from None

    def _probe(self) -> None:
        """Write and remove an object where the output goes: a missing bucket or credentials that
        cannot write stop the job before anything runs."""
        probe = f"{self._dir}/.probe"
        try:
            self.fs.pipe_file(probe, b"")
            self.fs.rm_file(probe)
        except Exception as exc:  # noqa: BLE001
            raise store_error(exc, self.url) from None

    def _write_manifest(self) -> None:
        self.fs.pipe_file(f"{self._dir}/{MANIFEST}", json.dumps({"meta": self.meta, "parts": self.parts},
                                                                indent=1).encode())

    # -- while the job runs --------------------------------------------------------------
    def due(self, buffered_rows: int, part_rows: int, flush_seconds: float) -> bool:
        return buffered_rows >= part_rows or (
            buffered_rows > 0 and time.monotonic() - self._last_commit >= flush_seconds)

    def commit(self, records: list) -> None:
        """Parquet record batches, or JSONL lines: one part, then the manifest that lists it."""
        if not records:
            return
        name = f"part-{len(self.parts):06d}{self.suffix}"
        if self.schema is not None:
            table = pa.Table.from_batches(records, schema=self.schema)
            buf = io.BytesIO()
            pq.write_table(table, buf)
            data, rows = buf.getvalue(), table.num_rows
        else:
            data, rows = "".join(line + "\n" for line in records).encode(), len(records)
        self.fs.pipe_file(f"{self._dir}/{name}", data)
        self.parts.append({"name": name, "rows": rows})
        self._write_manifest()
        self.committed += rows
        self._last_commit = time.monotonic()

    def committed_keys(self) -> Iterator[list]:
        for p in self.parts:
            path = f"{self._dir}/{p['name']}"
            if self.schema is not None:
                yield pq.read_table(path, columns=["id"], filesystem=self.fs).column("id").to_pylist()
            else:
                yield [json.loads(line).get("custom_id") for line in self.fs.cat_file(path).splitlines()]

    def finish(self) -> None:
        with self.fs.open(self.final, "wb") as out:   # appears whole when the upload completes
            if self.schema is not None:
                with pq.ParquetWriter(out, self.schema) as writer:
                    for p in self.parts:   # one part in memory at a time
                        writer.write_table(pq.read_table(f"{self._dir}/{p['name']}", schema=self.schema,
                                                         filesystem=self.fs))
            else:
                for p in self.parts:
                    out.write(self.fs.cat_file(f"{self._dir}/{p['name']}"))
        self.fs.rm(self._dir, recursive=True)
