"""Compressed transfers between Dask processes, the Dask way: a ``"zlib-ng"`` compressor.

What: ``register()`` adds ``"zlib-ng"`` (zlib-ng at level 1; its output is ordinary zlib data)
to Dask's table of compressors, ``distributed.protocol.compression.compressions``. Dask then
uses it for any frame it sends over a connection when ``distributed.comm.compression`` is
``"zlib-ng"`` in both processes of that connection (``maybe_compress``: frames of 10 kB or
more, and only if a sample shrinks to 70 % or less), and names it in the frame's header, from
which the receiver picks the decompressor. Without it our frames travel raw: with neither lz4
nor snappy installed, ``"auto"`` resolves to no compression.

Why: a cluster job's data that moves between processes -- each input partition's rows split
into per-shard pieces, Arrow tables of documents and questions -- is text, which compresses.
``scripts/transfer_bytes.py`` measures it (2-core box, one thread): the reuse burst's two
pieces (64 documents x 4 questions) 937 kB -> 77 kB (12.1x); a 1M-row scale input's 65,536-row
partitions (distinct synthetic documents) 1,579 MB -> 513 MB (3.1x), at ~540 MB/s to compress
and ~820 MB/s to decompress: 0.0045 CPU seconds per MB saved.

When it is on: only where the bytes cross a network link slower than compression.

* Workers on different hosts over 1 Gbit/s (or slower): on. The 1M-row input's partitions take
  12.6 s raw on a 1 Gbit/s wire; compressed, 4.1 s on the wire plus 4.8 s of CPU (8.9 s, even
  with no overlap of compression and sending). Break-even: ~1.8 Gbit/s for those rows, ~6-9
  Gbit/s for the reuse burst's more repetitive pieces.
* 10 Gbit/s or faster: off (1.3 s raw against 4.8 s of CPU for the 1M-row input).
* One host (the embedded cluster, the resident cluster, several processes on one machine):
  off. TCP loopback carries ~4 GB/s here, faster than compressing; and Dask does not compress
  there anyway: a connection whose two ends have the same IP address negotiates no
  compression whatever the setting (``Comm.handshake_info``).

Turning it on: the config's ``network.compression`` (``auto``, the default, or ``none``). Every
process the pipeline starts or runs in -- the client, the embedded and resident clusters,
``python -m pipeline scheduler`` and ``worker`` (nanny included) -- sets Dask's
``distributed.comm.compression`` from it (pipeline/cluster/worker_spec.py, ``cluster_settings``)
and imports this module, which registers the compressor, before its first connection: a preload
is imported while its server is built. Dask settles a connection's compression in its handshake and
falls back to raw where the two ends differ, so workers and clients check the scheduler's setting
when they join (pipeline/cluster/settings_check.py) and stop with an error where it differs.
"""

from __future__ import annotations

import time

from distributed.protocol import compression as _dask_compression
from zlib_ng import zlib_ng

NAME = "zlib-ng"
LEVEL = 1

# Frames this process compressed / decompressed with it, and their bytes. Compression counts
# include Dask's trial compressions of a frame's samples (``maybe_compress``); decompression
# counts are the compressed frames that arrived. Approximate under threads.
STATS = {
    "compressed_frames": 0,
    "compressed_in": 0,
    "compressed_out": 0,
    "decompressed_frames": 0,
    "decompressed_in": 0,
    "decompressed_out": 0,
}


def _buffer(data):
    """``data`` (bytes, bytearray, memoryview of any shape and format) as something zlib-ng
    reads without a copy where that is possible (a C-contiguous buffer), a copy otherwise."""
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
    """Add ``"zlib-ng"`` to Dask's compressors (in this process). Idempotent."""
    existing = _dask_compression.compressions.get(NAME)
    if existing is not None and existing.compress is compress and existing.decompress is decompress:
        return
    _dask_compression.compressions[NAME] = _dask_compression.Compression(NAME, compress, decompress)


SETTING = "distributed.comm.compression"


def dask_value(compression: str) -> str | bool:
    """Dask's ``distributed.comm.compression`` for the config's ``network.compression``. For
    ``auto`` it is zlib-ng: Dask itself leaves a connection between two ends of one host raw
    (``Comm.same_host``), so zlib-ng applies only between hosts."""
    return NAME if compression == "auto" else False


def describe(value) -> str:
    """A process's Dask compression setting as the config names it."""
    return "auto (zlib-ng between hosts)" if value == NAME else "none" if value in (False, None, "none") else str(value)


def dask_setup(server) -> None:
    """Dask preload hook (scheduler, worker or nanny). Registration already happened on import."""
    register()


def measure(payload: bytes) -> dict:
    """Raw and compressed bytes of ``payload``, and the seconds to compress and decompress it
    (the best of a few runs, single-threaded)."""
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


register()  # on import: a preload is imported while its server is built, before any connection
