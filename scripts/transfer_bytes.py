#!/usr/bin/env python
"""What zlib-ng level 1 does to the bytes a cluster job moves between Dask processes, and when
that pays on a network link (pipeline/compression.py).

    .venv/bin/python scripts/transfer_bytes.py              # 1M-row input
    .venv/bin/python scripts/transfer_bytes.py --rows 200000

Measured, single-threaded, on this machine:

(a) the benchmark's reuse burst (64 documents x 4 questions, ~750-token documents) as an Arrow
    table (document, question, id), split into 2 pieces by a hash of the document, each piece
    an Arrow IPC stream -- the form in which Dask sends a pyarrow Table;
(b) a large input made by scripts/scale_input.py (the repository's scale-measurement input:
    1,500-character documents, 4 questions each, rows shuffled) as Arrow IPC streams of 65,536
    rows each (a partition), summed;
(c) for each, what a 1 Gbit/s and a 10 Gbit/s link take for the raw and the compressed bytes,
    against the CPU seconds to compress and decompress. Compression pays on a link when
    bytes_saved / link_rate > compress_s + decompress_s (the serial worst case: no overlap of
    compression with sending);
(d) for reference, this machine's TCP loopback rate (what a single-host cluster's transfers get).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.bench.options import BenchOptions, burst_rows  # noqa: E402
from pipeline.compression import LEVEL, NAME, measure  # noqa: E402

PARTITION_ROWS = 65_536
LINKS = (("1 Gbit/s", 1e9 / 8), ("10 Gbit/s", 10e9 / 8))  # bytes per second


def ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def total(measures: list[dict]) -> dict:
    return {k: sum(m[k] for m in measures) for k in measures[0]}


def burst_pieces() -> list[bytes]:
    rows = burst_rows("reuse", BenchOptions(), seed=1)
    table = pa.Table.from_pylist([{"document": r["document"], "question": r["question"], "id": r["id"]} for r in rows])
    shard = [zlib.crc32(d.encode()) % 2 for d in table.column("document").to_pylist()]
    return [ipc_bytes(table.filter(pa.array([s == k for s in shard]))) for k in range(2)]


def input_partitions(rows: int, folder: Path):
    path = folder / "input.parquet"
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "scale_input.py"), str(path), "--rows", str(rows)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    table = pq.read_table(path, columns=["document", "question", "id"])
    print(
        f"made and read a {rows:,}-row input ({path.stat().st_size / 1e6:,.0f} MB Parquet) in "
        f"{time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    for start in range(0, table.num_rows, PARTITION_ROWS):
        yield ipc_bytes(table.slice(start, PARTITION_ROWS))


def loopback_rate(nbytes: int = 512 << 20) -> float:
    """Bytes per second one TCP connection over 127.0.0.1 carries here (send + receive)."""
    server = socket.create_server(("127.0.0.1", 0))
    received = [0]

    def sink() -> None:
        conn, _ = server.accept()
        buf = bytearray(1 << 20)
        while (n := conn.recv_into(buf)) > 0:
            received[0] += n
        conn.close()

    thread = threading.Thread(target=sink)
    thread.start()
    chunk = b"x" * (4 << 20)
    with socket.create_connection(server.getsockname()) as client:
        t0 = time.perf_counter()
        for _ in range(nbytes // len(chunk)):
            client.sendall(chunk)
        client.shutdown(socket.SHUT_WR)
        thread.join()
        elapsed = time.perf_counter() - t0
    server.close()
    return received[0] / elapsed


def report(label: str, m: dict, pieces: int) -> None:
    raw, comp, c, d = m["raw_bytes"], m["compressed_bytes"], m["compress_s"], m["decompress_s"]
    saved = raw - comp
    print(f"\n{label}: {pieces} piece(s)")
    print(f"  {'':34}{'raw':>14}{NAME + ' level ' + str(LEVEL):>20}")
    print(f"  {'bytes':34}{raw:>14,}{comp:>20,}")
    print(f"  {'ratio (raw / compressed)':34}{'':>14}{raw / comp:>19.1f}x")
    print(f"  {'compress':34}{'':>14}{raw / c / 1e6:>14,.0f} MB/s  ({c:.4f} s)")
    print(f"  {'decompress':34}{'':>14}{raw / d / 1e6:>14,.0f} MB/s  ({d:.4f} s)")
    print(f"  {'CPU s per MB saved':34}{'':>14}{(c + d) / (saved / 1e6):>20.4f}")
    for name, rate in LINKS:
        raw_s, comp_s = raw / rate, comp / rate
        pays = saved / rate > c + d
        print(
            f"  {name:>9}: raw {raw_s:.4f} s on the wire; compressed {comp_s:.4f} s + {c + d:.4f} s CPU "
            f"= {comp_s + c + d:.4f} s -> {'PAYS' if pays else 'does not pay'} "
            f"(saves {saved / rate:.4f} s of wire for {c + d:.4f} s of CPU)"
        )
    print(f"  break-even link: {saved * 8 / (c + d) / 1e9:.2f} Gbit/s (compression pays on slower links)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000, help="rows of the large input (b)")
    a = p.parse_args()

    pieces = burst_pieces()
    report(
        "(a) reuse burst, 64 documents x 4 questions, Arrow IPC pieces for 2 shards",
        total([measure(b) for b in pieces]),
        len(pieces),
    )

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        measures = [measure(part) for part in input_partitions(a.rows, Path(tmp))]
        report(
            f"(b) {a.rows:,}-row input, Arrow IPC per {PARTITION_ROWS:,}-row partition, summed",
            total(measures),
            len(measures),
        )
        print(f"  (made and measured in {time.perf_counter() - t0:.1f} s)")

    rate = loopback_rate()
    print(
        f"\n(d) TCP loopback here: {rate / 1e6:,.0f} MB/s ({rate * 8 / 1e9:.1f} Gbit/s), one connection: "
        f"faster than compression, and Dask negotiates no compression between two ends with the same IP address"
    )


if __name__ == "__main__":
    main()
