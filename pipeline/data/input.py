"""Job input: Parquet files, a folder or a glob of them, or an OpenAI batch JSONL file. Everything that can be
checked before an engine starts is checked on opening."""

from __future__ import annotations

import functools
import glob
import os
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.data.errors import JobError, one_line
from pipeline.data.request_lines import first_bad_line
from pipeline.data.request_rows import parse_line
from pipeline.data.row_checks import RowColumns
from pipeline.data.scoring_lines import SCORING, scoring_kind
from pipeline.data.storage import address, address_on, filesystem, glob_reaches, inside, is_url, local_path, store_error
from pipeline.names import CHAT_URL, ENDPOINTS
from pipeline.results import RESULT_FIELDS


def open_source(
    spec: str | os.PathLike,
    fmt: str,
    columns,
    storage_options: dict | None = None,
    adapters=(),
    tool_parser: str | None = None,
) -> "ParquetSource | OpenAIBatchSource":
    """Opens a job's input. ``adapters`` are the configured adapters' names: a batch request whose ``model`` names
    one is answered with it. ``tool_parser`` reads a chat line's answer under tool_choice "auto"."""
    text = str(spec)
    if fmt == "auto":
        fmt = "openai" if text.endswith(".jsonl") else "parquet"
    if fmt not in ("openai", "parquet"):
        raise JobError(f"unknown input format {fmt!r}; use parquet or openai")
    fs = filesystem(text, storage_options)[0] if is_url(text) else None
    if fs is None:
        text = local_path(text)
    if fmt == "openai":
        return OpenAIBatchSource(text, fs, adapters, tool_parser)
    return ParquetSource(text, columns, fs)


def check_output_apart(
    source: "ParquetSource | OpenAIBatchSource", output: str | os.PathLike, storage_options: dict | None = None
) -> None:
    """Raises ``JobError`` when writing OUTPUT or OUTPUT.partial would touch the input, which the next run would
    read."""
    out = address(output, storage_options)
    partial = out + ".partial"
    spec = str(source.spec if isinstance(source, ParquetSource) else source.path)
    where = functools.partial(address_on, source.fs) if source.fs is not None else os.path.realpath
    root, files = where(spec), [where(f) for f in source.files]
    problem = None
    if out in files:
        problem = f"is the job's input ({out})"
    elif source.named == "folder" and out == root:
        problem = f"is the input folder {root}"
    elif source.named == "folder" and inside(out, root):
        problem = f"is inside the input folder {root}"
    elif source.named == "glob" and glob_reaches(root, out):
        problem = f"is matched by the input glob {root}"
    elif (
        any(f == partial or inside(f, partial) for f in files)
        or source.named == "folder"
        and (partial == root or inside(root, partial))
    ):
        problem = f"has its partial results folder {partial} holding the job's input"
    elif source.named == "folder" and inside(partial, root):
        problem = f"has its partial results folder {partial} inside the input folder {root}"
    elif source.named == "glob" and glob_reaches(root, partial, below=True):
        problem = f"has its partial results folder {partial} where the input glob {root} looks"
    if problem:
        raise JobError(
            f"OUTPUT {output} {problem}; choose another output path (a job never writes over or into its input)"
        )


def _store_files(spec: str, fs) -> list[str]:
    """The Parquet files an object-store URL names, skipping names that start with "." or "_" as pyarrow does."""
    root = fs._strip_protocol(spec)
    try:
        if glob.has_magic(root):
            files = sorted(f for f in fs.glob(root) if fs.isfile(f))
            if not files:
                raise JobError(f"input not found: no file matches {spec}")
            return files
        if fs.isdir(root):
            files = sorted(
                f
                for f in fs.find(root)
                if not any(part.startswith((".", "_")) for part in f[len(root) :].strip("/").split("/"))
            )
            if not files:
                raise JobError(f"input folder {spec} holds no Parquet files")
            return files
        if not fs.exists(root):
            raise JobError(f"input not found: {spec}")
    except JobError:
        raise
    except Exception as exc:  # noqa: BLE001 - the store's own errors: credentials, bucket, network
        raise store_error(exc, spec) from None
    return [root]


def _parquet_files(spec: str) -> list[str]:
    if glob.has_magic(spec):
        files = sorted(f for f in glob.glob(spec, recursive=True) if os.path.isfile(f))
        if not files:
            raise JobError(f"input not found: no file matches {spec}")
        return files
    if not os.path.exists(spec):
        raise JobError(f"input not found: {spec}")
    if os.path.isdir(spec):
        # Imported here because pyarrow.dataset loads pandas, which would slow every process's start.
        import pyarrow.dataset as ds

        files = sorted(ds.dataset(spec, format="parquet").files)
        if not files:
            raise JobError(f"input folder {spec} holds no Parquet files")
        return files
    return [spec]


class ParquetSource:
    format = "parquet"

    def __init__(self, spec: str, columns, fs=None):
        self.spec = spec
        self.fs = fs  # None for local files
        self.files = _store_files(spec, fs) if fs is not None else _parquet_files(spec)
        root = fs._strip_protocol(spec) if fs is not None else spec
        # how the input was named, for the checks on OUTPUT
        self.named = "glob" if glob.has_magic(root) else "file" if self.files == [root] else "folder"
        self.row_groups: list[list[int]] = []  # per file, the rows of each of its row groups
        schema = None
        for f in self.files:
            try:
                meta = pq.ParquetFile(f, filesystem=fs).metadata
                file_schema = meta.schema.to_arrow_schema().remove_metadata()
            except (pa.ArrowException, OSError) as exc:
                raise JobError(f"cannot read {f} as Parquet: {one_line(exc)}") from None
            if schema is None:
                schema = file_schema
            elif not file_schema.equals(schema):
                raise JobError(
                    f"input files disagree on their columns: {self.files[0]} has "
                    f"{_describe(schema)}; {f} has {_describe(file_schema)}"
                )
            self.row_groups.append([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
        assert schema is not None  # files is never empty
        self.schema = schema
        self.num_rows = sum(sum(g) for g in self.row_groups)
        missing = columns.missing(schema.names)
        if missing:
            raise JobError(f"input {spec} {missing}; it has: {', '.join(schema.names) or '(none)'}")
        self.key = "id" if "id" in schema.names else None
        self.row_columns = RowColumns.of(columns, schema.names)  # what the task reads
        # The task's input columns are not copied to the output; join on id to see them again.
        written = columns.writes or RESULT_FIELDS[1:]
        self.passthrough = [n for n in schema.names if n not in (*columns.all, "id", *written)]
        self.dropped = [n for n in schema.names if n in written]

    @property
    def description(self) -> list[str]:
        if self.fs is not None:
            return [self.fs.unstrip_protocol(f) for f in self.files]
        return [os.path.abspath(f) for f in self.files]

    @property
    def key_type(self) -> pa.DataType:
        return self.schema.field("id").type if self.key else pa.int64()

    def key_arrays(self) -> Iterator[pa.Array]:
        if self.key is None:
            return
        for f in self.files:
            try:
                for batch in pq.ParquetFile(f, filesystem=self.fs).iter_batches(batch_size=65536, columns=["id"]):
                    yield batch.column(0)
            except (pa.ArrowException, OSError) as exc:
                raise JobError(f"cannot read the id column of {self.spec}: {one_line(exc)}") from None


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} ({f.type})" for f in schema)


class OpenAIBatchSource:
    """An OpenAI batch JSONL file, one request per line, all for the endpoint the first line's url names. Opening it
    reads only its first line; the workers read it a block of bytes at a time."""

    format = "openai"
    named = "file"
    key = "custom_id"
    key_type = pa.string()
    passthrough: list[str] = []
    dropped: list[str] = []

    def __init__(self, path: str, fs=None, adapters=(), tool_parser: str | None = None):
        self.path = path  # a local absolute path, or a URL on ``fs``
        self.files = [path]
        self.fs = fs
        self.adapters = frozenset(adapters)  # a request's model naming one of these answers with that adapter
        self.tool_parser = tool_parser  # reads a chat line's answer under tool_choice "auto" (None: an error line)
        try:
            if not (fs.isfile(path) if fs is not None else os.path.exists(path)):
                raise JobError(f"input not found: {path}")
            self.size = fs.size(path) if fs is not None else os.path.getsize(path)
            first = next(self._lines(), None)
        except JobError:
            raise
        except OSError as exc:
            raise JobError(f"cannot read {path}: {exc.strerror or exc}") from None
        except Exception as exc:  # noqa: BLE001 - the store's own errors
            raise store_error(exc, path) from None
        if first is not None and not isinstance(first[0], dict):
            raise JobError(
                f"{path} is not OpenAI batch JSONL: its first line is not a JSON object "
                f"(expected one request per line: custom_id, method, url, body)"
            )
        # The first line's url names every line's endpoint; chat if it names none this program serves.
        url = first[0].get("url") if first is not None else None
        self.endpoint = url if url in ENDPOINTS else SCORING if scoring_kind(url) else CHAT_URL

    @property
    def description(self) -> list[str]:
        return self.files

    def open(self):
        return self.fs.open(self.path, "rb") if self.fs is not None else open(self.path, "rb")

    def _lines(self) -> Iterator[tuple[Any, str | None]]:
        """(parsed request or None, error) for each non-blank line."""
        with self.open() as f:
            for raw in f:
                if raw.strip():
                    yield parse_line(raw)

    @functools.cached_property
    def _keys(self) -> list:
        """Each request's custom_id, read from every line."""
        try:
            return [request.get("custom_id") if isinstance(request, dict) else None for request, _ in self._lines()]
        except OSError as exc:
            raise JobError(f"cannot read {self.path}: {exc.strerror or exc}") from None

    @property
    def num_rows(self) -> int:
        return len(self._keys)

    def check_requests(self) -> None:
        """Raises ``JobError`` naming the first line that fails the whole file."""
        try:
            with self.open() as f:
                bad = first_bad_line(f, self.endpoint, "this file's endpoint (its first line's url)")
        except OSError as exc:
            raise JobError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        if bad is not None:
            raise JobError(f"{self.path}: {bad.message}. Nothing was answered; fix the file and run again")

    def key_arrays(self) -> Iterator[pa.Array]:
        yield pa.array([k if isinstance(k, str) else None for k in self._keys], pa.string())
