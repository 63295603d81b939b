#!/usr/bin/env python
"""Write a large document-question Parquet input for plumbing measurements (fake engine).

    .venv/bin/python scripts/scale_input.py OUT.parquet --rows 1000000 --doc-chars 1500
    .venv/bin/python scripts/scale_input.py OUT.jsonl --rows 100000 --format openai

With ``--format openai`` the same rows are OpenAI batch chat requests: the document as the
system message, the question as the user message (the conversation before it is the prefix).

Documents are distinct (each starts with its number and repeats varied filler up to
``--doc-chars``), ``--questions-per-doc`` questions each, rows shuffled with a fixed seed (a
document's questions scattered through the file, as in real inputs). Written in chunks with
pyarrow, in seconds.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

WORDS = (
    "alpha beta gamma delta epsilon zeta theta iota kappa lambda river stone cloud paper "
    "window garden bridge market silver copper harbor engine signal lantern"
).split()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--questions-per-doc", type=int, default=4)
    p.add_argument("--doc-chars", type=int, default=1500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--row-group-rows",
        type=int,
        default=100_000,
        help="rows per Parquet row group (a Dask DataFrame partition with split_row_groups=True)",
    )
    p.add_argument("--format", choices=("parquet", "openai"), default="parquet")
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    n_docs = -(-a.rows // a.questions_per_doc)
    # 256 filler paragraphs; document d = its number + paragraph (d * 7919) % 256, cut to size
    fillers = []
    for _ in range(256):
        words = rng.choice(WORDS, size=a.doc_chars // 4)
        fillers.append(" ".join(words)[: a.doc_chars])
    filler = pa.array(fillers)
    order = rng.permutation(a.rows)  # row position -> (doc, question) slot
    chunk = a.row_group_rows
    schema = pa.schema({"id": pa.string(), "document": pa.string(), "question": pa.string()})
    with open(a.out, "w") if a.format == "openai" else pq.ParquetWriter(a.out, schema, compression="zstd") as w:
        for start in range(0, a.rows, chunk):
            slots = order[start : start + chunk]
            docs = slots // a.questions_per_doc
            d = pa.array(docs)
            doc_text = pc.binary_join_element_wise(
                pa.array(np.char.add("Document ", docs.astype(str)).astype(object)),
                filler.take(pa.array((docs * 7919) % 256)),
                ". ",
            )
            ids = pa.array(np.char.add("r", np.arange(start, start + len(slots)).astype(str)).astype(object))
            q = pc.binary_join_element_wise(
                pa.array(
                    np.char.add("What is said about item ", (slots % a.questions_per_doc).astype(str)).astype(object)
                ),
                pc.cast(d, pa.string()),
                " of document ",
            )
            table = pa.table({"id": ids, "document": doc_text, "question": q}, schema=schema)
            if a.format == "openai":
                w.writelines(_requests(table))
            else:
                w.write_table(table)
    print(f"wrote {a.rows} rows ({n_docs} documents of ~{a.doc_chars} characters) to {a.out}")


def _requests(table: pa.Table):
    for r in table.to_pylist():
        yield (
            json.dumps(
                {
                    "custom_id": r["id"],
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": {
                        "messages": [
                            {"role": "system", "content": r["document"]},
                            {"role": "user", "content": r["question"]},
                        ]
                    },
                }
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
