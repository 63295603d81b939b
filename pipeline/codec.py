"""Typed messages between client and workers, zlib-ng compressed.

A batch (client to worker) is an Arrow table in Arrow's IPC format, its header in the schema's
metadata: each distinct prompt prefix (document) is once in the prefix column's dictionary and
its rows refer to it, so a document asked about four times travels once. The worker answers it
as it answers a cluster job's bucket (pipeline/worker/grouped_answers.py). A batch's results
(worker to client) are msgpack-encoded.
"""
from __future__ import annotations

from dataclasses import dataclass

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
from zlib_ng import zlib_ng

from pipeline.results import RowResult
from pipeline.sampling import ROW_COLUMNS, Sampling


class BatchHeader(msgspec.Struct, gc=False):
    batch_id: str
    # A prompt longer than the engine's context: cut the end of its prefix (True) or
    # answer the row with an error (False).
    truncate_prompts: bool = False
    sampling: Sampling | None = None   # the job's settings (None: the worker's config)


@dataclass
class RowsBatch:
    """A batch of rows as it travels to a shard: an Arrow table of position, prefix and suffix (a
    row's own sampling settings, if any row has some, in ``ROW_COLUMNS``), each document once in
    its prefix column's dictionary, the rows of a document one after another."""
    header: BatchHeader
    rows: pa.Table


def rows_of_groups(groups: dict[str, list[tuple[int, str]]], own=None) -> pa.Table:
    """``groups`` (prefix -> its rows' (position, suffix)) as a batch's rows; ``own(position)``:
    the row's own sampling settings, or None."""
    slots, positions, suffixes = [], [], []
    for slot, items in enumerate(groups.values()):
        for i, suffix in items:
            slots.append(slot)
            positions.append(i)
            suffixes.append(suffix)
    columns = {"position": pa.array(positions, pa.int64()),
               "prefix": pa.DictionaryArray.from_arrays(pa.array(slots, pa.int32()),
                                                        pa.array(list(groups), pa.large_string())),
               "suffix": pa.array(suffixes, pa.large_string())}
    settings = [own(i) for i in positions] if own is not None else []
    if any(s is not None for s in settings):
        for name in ROW_COLUMNS:
            columns[name] = pa.array([getattr(s, name) if s is not None else None for s in settings])
    return pa.table(columns)


def raw_size(rows: pa.Table) -> int:
    """Bytes of text the batch's rows stand for if each carried its whole prompt."""
    prefix = rows.column("prefix").combine_chunks()
    per_row = pc.add(pc.binary_length(prefix.dictionary).take(prefix.indices), pc.binary_length(rows.column("suffix")))
    return int(pc.sum(per_row).as_py() or 0)


class BatchResult(msgspec.Struct, gc=False):
    batch_id: str
    shard: str
    results: list[RowResult]   # id unset: the client knows each row's id


_header_decoder = msgspec.msgpack.Decoder(BatchHeader)
_result_decoder = msgspec.msgpack.Decoder(BatchResult)
_encoder = msgspec.msgpack.Encoder()
_HEADER_KEY = b"pipeline-batch"


def encode_batch(batch: RowsBatch, level: int = 1) -> bytes:
    sink = pa.BufferOutputStream()
    schema = batch.rows.schema.with_metadata({_HEADER_KEY: _encoder.encode(batch.header)})
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(batch.rows)
    return zlib_ng.compress(sink.getvalue(), level)


def decode_batch(payload: bytes) -> RowsBatch:
    rows = pa.ipc.open_stream(zlib_ng.decompress(payload)).read_all()
    header = _header_decoder.decode(rows.schema.metadata[_HEADER_KEY])
    return RowsBatch(header, rows.replace_schema_metadata(None))


def encode(msg: BatchResult, level: int = 1) -> bytes:
    return zlib_ng.compress(_encoder.encode(msg), level)


def decode_result(payload: bytes) -> BatchResult:
    return _result_decoder.decode(zlib_ng.decompress(payload))
