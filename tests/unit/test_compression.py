"""The "zlib-ng" compressor for Dask transfers (pipeline/compression.py): registered
once, round-trips the buffers Dask hands it, used by Dask's own serialization when
``distributed.comm.compression`` names it, and between two worker processes on a cluster.
"""

import os
import socket
import sys

import cloudpickle
import dask
import msgpack
import numpy as np
import pyarrow as pa
import pytest
from distributed import Client, Nanny, Scheduler, SpecCluster
from distributed.protocol import compression as dask_compression
from distributed.protocol.core import dumps, loads
from distributed.protocol.serialize import Serialize, deserialize_bytes, serialize_bytelist, unpack_frames

from pipeline import compression
from pipeline.compression import NAME

CONFIG_KEY = "distributed.comm.compression"


def rows_table(n_docs: int = 64, questions: int = 4, doc_chars: int = 3000) -> pa.Table:
    """Document/question rows as a cluster job's pieces hold them: each document with each of its
    questions."""
    words = "alpha beta gamma delta river stone cloud paper window garden bridge market".split()
    rng = np.random.default_rng(0)
    docs = [f"Document {d}. " + " ".join(rng.choice(words, size=doc_chars // 6))[:doc_chars] for d in range(n_docs)]
    rows = [
        {"document": docs[d], "question": f"What is said about item {q} of document {d}?", "id": f"r{d}-{q}"}
        for d in range(n_docs)
        for q in range(questions)
    ]
    return pa.Table.from_pylist(rows)


def ipc(table: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def test_register_is_idempotent():
    before = dict(dask_compression.compressions)
    compression.register()
    compression.register()
    assert dask_compression.compressions == before  # registered on import; nothing added twice
    entry = dask_compression.compressions[NAME]
    assert entry.name == NAME and entry.compress is compression.compress
    compression.dask_setup(object())  # the preload hook: same entry
    assert dask_compression.compressions[NAME] is entry


def test_round_trips_the_buffers_dask_passes():
    buf = ipc(rows_table())
    view = memoryview(buf)
    packed = compression.compress(view)
    assert len(packed) < view.nbytes / 2
    unpacked = compression.decompress(memoryview(packed))
    assert unpacked == view.tobytes()
    assert pa.ipc.open_stream(unpacked).read_all().equals(rows_table())
    # bytes, bytearray, a slice (as Dask's byte samples are), a typed and a strided view
    for data in (bytes(view[:50_000]), bytearray(view[:50_000]), view[1_000:9_000]):
        assert compression.decompress(compression.compress(data)) == bytes(data)
    floats = np.arange(10_000, dtype="f8")
    assert compression.decompress(compression.compress(memoryview(floats))) == floats.tobytes()
    assert compression.decompress(compression.compress(memoryview(floats)[::2])) == floats[::2].tobytes()


def test_measure():
    m = compression.measure(ipc(rows_table()).to_pybytes())
    assert set(m) == {"raw_bytes", "compressed_bytes", "compress_s", "decompress_s"}
    assert m["compressed_bytes"] < m["raw_bytes"] / 2 and m["compress_s"] > 0 and m["decompress_s"] > 0


def test_unregistered_setting_fails_the_handshake_setting(monkeypatch):
    """Why every process must register before its first connection."""
    monkeypatch.delitem(dask_compression.compressions, NAME)
    with dask.config.set({CONFIG_KEY: NAME}), pytest.raises(ValueError, match="Invalid compression setting"):
        dask_compression.get_compression_settings(CONFIG_KEY)


def _frame_compressions(frames) -> list:
    """The per-frame compression names of a ``serialize_bytelist`` result's header."""
    header = msgpack.loads(frames[1], raw=False, use_list=False)
    return list(header["compression"])


def test_dask_serialization_uses_it_when_configured():
    table = rows_table()
    with dask.config.set({CONFIG_KEY: NAME}):
        chosen = dask_compression.get_compression_settings(CONFIG_KEY)  # what a comm's handshake offers
    assert chosen == NAME

    # One object: the frames a pyarrow Table serializes to, compressed and marked per frame
    raw = serialize_bytelist(table, compression=None)
    packed = serialize_bytelist(table, compression=chosen)
    assert NAME in _frame_compressions(packed) and NAME not in _frame_compressions(raw)
    packed_bytes = b"".join(bytes(f) for f in packed)
    assert len(packed_bytes) < sum(memoryview(f).nbytes for f in raw) / 2
    assert deserialize_bytes(packed_bytes).equals(table)
    assert unpack_frames(packed_bytes)  # a well-formed byte stream

    # A message as a comm sends it (the context carries the handshake's choice)
    msg = {"op": "pieces", "table": Serialize(table), "blob": Serialize(ipc(table).to_pybytes())}
    frames = dumps(msg, context={"compression": chosen})
    plain = dumps(msg, context={"compression": None})
    size = lambda fs: sum(memoryview(f).nbytes for f in fs)  # noqa: E731
    assert size(frames) < size(plain) / 2
    back = loads(frames)
    assert back["op"] == "pieces" and back["table"].equals(table) and back["blob"] == ipc(table).to_pybytes()


# --- end to end: two worker processes -----------------------------------------------------------


def make_table() -> pa.Table:
    return rows_table(n_docs=96, questions=4, doc_chars=2500)  # ~1 MB of Arrow


def len_of(table: pa.Table) -> tuple[int, int]:
    return table.num_rows, sum(len(d) for d in table.column("document").to_pylist())


def stats() -> dict:
    from pipeline import compression as c

    return dict(c.STATS)


def _loopback_ok(host: str) -> bool:
    try:
        with socket.create_server((host, 0)):
            return True
    except OSError:
        return False


def test_workers_on_different_addresses_move_a_table_compressed():
    """Dask compresses only between two ends whose IP addresses differ (``Comm.same_host``: a
    single-host cluster negotiates no compression whatever the setting). So the two workers
    listen on distinct loopback addresses, 127.0.0.2 and 127.0.0.3, as workers on two hosts
    would; the scheduler on 127.0.0.1. Each worker registers the compressor in its preload."""
    if not (_loopback_ok("127.0.0.2") and _loopback_ok("127.0.0.3")):
        pytest.skip("127.0.0.2/127.0.0.3 are not usable loopback addresses here")
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # (the tasks run on the workers)
    worker = {"nthreads": 1, "dashboard": False, "preload": ["pipeline.compression"], "memory_limit": 0}
    environ = dict(os.environ)  # (Dask's nannies write into this process's environment: put back below)
    try:
        result, before, after, b, a = _move_a_table(worker)
    finally:
        os.environ.clear()
        os.environ.update(environ)
    expected = make_table()
    assert result == len_of(expected)
    assert ipc(expected).size > 900_000
    received = {k: after[b][k] - before[b][k] for k in after[b]}
    sent = {k: after[a][k] - before[a][k] for k in after[a]}
    # a compressed the table it sent; b received it compressed and decompressed it
    assert sent["compressed_frames"] >= 1 and sent["compressed_in"] >= 900_000
    assert received["decompressed_frames"] >= 1 and received["decompressed_out"] >= 900_000
    assert received["decompressed_in"] < received["decompressed_out"] / 2


def _move_a_table(worker: dict):
    """A table made on worker a and its length taken on b: (length, stats before, stats after, b, a)."""
    with dask.config.set({CONFIG_KEY: NAME, "distributed.worker.daemon": False}):
        # registered in this process too (the client and the nannies): imported above
        with (
            SpecCluster(
                scheduler={"cls": Scheduler, "options": {"host": "127.0.0.1", "dashboard_address": None}},
                workers={
                    "a": {"cls": Nanny, "options": {**worker, "host": "127.0.0.2"}},
                    "b": {"cls": Nanny, "options": {**worker, "host": "127.0.0.3"}},
                },
                asynchronous=False,
            ) as cluster,
            Client(cluster) as client,
        ):
            client.wait_for_workers(2, timeout=30)
            by_name = {w["name"]: addr for addr, w in client.scheduler_info()["workers"].items()}
            a, b = by_name["a"], by_name["b"]
            before = client.run(stats)
            table = client.submit(make_table, workers=[a], pure=False)
            result = client.submit(len_of, table, workers=[b], pure=False).result(timeout=30)
            after = client.run(stats)
    return result, before, after, b, a
