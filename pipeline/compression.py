"""A ``"zlib-ng"`` compressor for Dask's transfers between processes, at level 1.

With neither lz4 nor snappy installed, Dask's ``"auto"`` sends everything raw. A job's data is
text and compresses well, which pays across a network link slower than compression; Dask leaves
connections within one host raw anyway. Every process the pipeline starts imports this module
before its first connection. Both ends of a connection must have the same setting, or Dask
silently sends raw."""

from __future__ import annotations

import time

from distributed.protocol import compression as _dask_compression
from zlib_ng import zlib_ng

NAME = "zlib-ng"
LEVEL = 1

# Frames this process compressed and decompressed, and their bytes. Compression counts include
# Dask's trial compressions of samples. Approximate under threads.
STATS = {
    "compressed_frames": 0,
    "compressed_in": 0,
    "compressed_out": 0,
    "decompressed_frames": 0,
    "decompressed_in": 0,
    "decompressed_out": 0,
}


def _buffer(data):
    """``data`` as zlib-ng can read it: itself where it is C-contiguous, else a copy."""
    if isinstance(data, memoryview) and not data.c_contiguous:
        return data.tobytes()
    return data


def compress(data) -> bytes:
    out = zlib_ng.compress(_buffer(data), LEVEL)
    STATS["compressed_frames"] += 1
    STATS["compressed_in"] += memoryview(data).nbytes
    STATS["compressed_out"] += len(out)
    return out


def decompress(data) -> bytes:
    out = zlib_ng.decompress(_buffer(data))
    STATS["decompressed_frames"] += 1
    STATS["decompressed_in"] += memoryview(data).nbytes
    STATS["decompressed_out"] += len(out)
    return out


def register() -> None:
    """Add ``"zlib-ng"`` to this process's Dask compressors. Idempotent."""
    existing = _dask_compression.compressions.get(NAME)
    if existing is not None and existing.compress is compress and existing.decompress is decompress:
        return
    _dask_compression.compressions[NAME] = _dask_compression.Compression(NAME, compress, decompress)


SETTING = "distributed.comm.compression"


def dask_value(compression: str) -> str | bool:
    """Dask's setting for the config's ``network.compression``. Dask leaves same-host connections
    raw, so ``auto`` compresses only between hosts."""
    return NAME if compression == "auto" else False


def describe(value) -> str:
    """A process's Dask compression setting as the config names it."""
    return "auto (zlib-ng between hosts)" if value == NAME else "none" if value in (False, None, "none") else str(value)


def dask_setup(server) -> None:
    """Dask preload hook; registering on import already did the work."""
    register()


def measure(payload: bytes) -> dict:
    """Raw and compressed sizes of ``payload``, and its best single-threaded compress and decompress times."""
    view = memoryview(payload)
    raw = view.nbytes
    runs = 5 if raw < 8 << 20 else 1
    compress_s = decompress_s = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        packed = zlib_ng.compress(_buffer(view), LEVEL)
        t1 = time.perf_counter()
        unpacked = zlib_ng.decompress(packed)
        t2 = time.perf_counter()
        compress_s, decompress_s = min(compress_s, t1 - t0), min(decompress_s, t2 - t1)
    if len(unpacked) != raw:
        raise AssertionError("zlib-ng round trip changed the payload's size")
    return {"raw_bytes": raw, "compressed_bytes": len(packed), "compress_s": compress_s, "decompress_s": decompress_s}


register()  # on import, since a preload is imported before its server's first connection
