#!/usr/bin/env python
"""The least work a null job must do, done by one plain process: the yardstick for the
pipeline's own cost per row (issue 25's "plumbing floor").

    .venv/bin/python scripts/scale_floor.py IN.parquet OUT.parquet [--shards 2]

Reads the input in 64k-row batches with pyarrow, dictionary-encodes each batch's documents,
digests each distinct document of the batch once (blake2b), assigns it one of the shards (the
digest modulo their number: the same document, the same shard, in every batch), and writes id /
empty answer / shard. Prints rows/s, CPU
seconds and peak RSS, for a side-by-side run with ``python -m pipeline run ... --engine fake``
on the same file (scripts/scale_compare.py runs both).
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

BATCH_ROWS = 64 * 1024


def floor(src: str, dst: str, shards: int) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    names = pa.array([f"cpu{i}" for i in range(shards)])
    rows = digested = 0
    schema = pa.schema({"id": pa.string(), "answer": pa.string(), "shard": pa.string()})
    with pq.ParquetWriter(dst, schema) as out:
        for batch in pq.ParquetFile(src).iter_batches(batch_size=BATCH_ROWS, columns=["id", "document"]):
            docs = pc.dictionary_encode(batch.column("document"))
            shard_of = [
                int.from_bytes(hashlib.blake2b(doc.encode(), digest_size=8).digest(), "little") % shards
                for doc in docs.dictionary.to_pylist()
            ]
            digested += len(shard_of)
            shard = names.take(pa.array(shard_of).take(docs.indices))
            n = batch.num_rows
            out.write_table(
                pa.table(
                    {"id": batch.column("id"), "answer": pa.nulls(n, pa.string()).fill_null(""), "shard": shard},
                    schema=schema,
                )
            )
            rows += n
    wall = time.perf_counter() - t0
    return {
        "rows": rows,
        "digests": digested,
        "wall_s": wall,
        "rows_per_s": rows / wall,
        "cpu_s": time.process_time() - c0,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--shards", type=int, default=2)
    a = p.parse_args()
    r = floor(a.input, a.output, a.shards)
    print(
        f"floor: {r['rows']} rows ({r['digests']} digests) in {r['wall_s']:.1f} s: {r['rows_per_s']:,.0f} rows/s, "
        f"{r['cpu_s']:.1f} s CPU, peak RSS {r['peak_rss_mb']:.0f} MB"
    )


if __name__ == "__main__":
    main()
