"""Typed messages between client and workers, msgpack-encoded and zlib-ng compressed.

A batch carries each distinct prompt prefix (document) once, and its requests refer
to it by position, so a document asked about four times travels once.
"""
from __future__ import annotations

import msgspec
from zlib_ng import zlib_ng

from pipeline.results import RowResult
from pipeline.sampling import Sampling


class Request(msgspec.Struct, array_like=True, gc=False):
    index: int     # the row's position in the job; ids and extra columns never travel
    prefix: int    # position in Batch.prefixes
    suffix: str
    sampling: Sampling | None = None   # the row's own settings (over the batch's)


class Batch(msgspec.Struct, gc=False):
    batch_id: str
    prefixes: list[str]
    requests: list[Request]
    # A prompt longer than the engine's context: cut the end of its prefix (True) or
    # answer the row with an error (False).
    truncate_prompts: bool = False
    sampling: Sampling | None = None   # the job's settings (None: the worker's config)


class BatchResult(msgspec.Struct, gc=False):
    batch_id: str
    shard: str
    results: list[RowResult]   # id unset: the client knows each row's id


_batch_decoder = msgspec.msgpack.Decoder(Batch)
_result_decoder = msgspec.msgpack.Decoder(BatchResult)
_encoder = msgspec.msgpack.Encoder()


def encode(msg: Batch | BatchResult, level: int = 1) -> bytes:
    return zlib_ng.compress(_encoder.encode(msg), level)


def decode_batch(payload: bytes) -> Batch:
    return _batch_decoder.decode(zlib_ng.decompress(payload))


def decode_result(payload: bytes) -> BatchResult:
    return _result_decoder.decode(zlib_ng.decompress(payload))


def raw_size(batch: Batch) -> int:
    """Bytes of text the batch stands for if every request carried its whole prompt."""
    return sum(len(batch.prefixes[r.prefix].encode()) + len(r.suffix.encode()) for r in batch.requests)
