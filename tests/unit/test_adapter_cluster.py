"""A job whose rows name more adapters than an engine's LoRA slots, on two shards of the fake
engine (engine.max_loras 2, four adapters): each shard's engine answers with at most two of them
(the fake engine answers a row with its adapter's name; the output's ``shard`` column says which
shard answered it), each (document, adapter) on one shard, and every row is answered once, in
input order. Placement itself: tests/unit/test_adapter_placement.py."""

import json
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import Pipeline, load_config
from pipeline.jobs.job import run_job

ADAPTERS = ("legal", "support", "terse", "wide")
SHARDS = [{"name": "cpu0", "kind": "cpu", "devices": [0]}, {"name": "cpu1", "kind": "cpu", "devices": [1]}]


def _adapter(folder):
    """A folder that passes the workers' checks (the fake engine loads nothing)."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))
    save_file({"q_proj.lora_A.weight": np.zeros((8, 4), np.float32)}, str(folder / "adapter_model.safetensors"))
    return str(folder)


@pytest.fixture(scope="module")
def four_adapters(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    config = load_config().replace(
        scheduler={"dashboard_address": None},
        shards=SHARDS,
        model={"adapters": {name: _adapter(root / name) for name in ADAPTERS}},
        jobs={"partition_rows": 16, "bucket_rows": 12},
    )
    assert config.lora_slots == 2
    with Pipeline(config, engine="fake") as p:
        yield p


def test_each_shard_answers_with_at_most_max_loras_adapters_every_row_once_in_order(four_adapters, tmp_path):
    rng = random.Random(44)
    # every document asked under several adapters, and under none (the base model)
    names = [ADAPTERS[k % 4] for k in range(72)] + [None] * 24
    rng.shuffle(names)
    rows = [
        {"document": f"document {k % 6} " + "text " * (10 + k % 6), "question": f"question {k}", "adapter": a}
        for k, a in enumerate(names)
    ]
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src, row_group_size=16)
    summary = run_job(four_adapters, src, tmp_path / "out.parquet", progress=False)
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [o["id"] for o in out] == list(range(len(rows))) and summary.rows == len(rows)
    assert all(o["error"] is None for o in out)
    assert [o["answer"] for o in out] == [a or "" for a in names]  # (the fake engine answers with the adapter)
    served: dict = {}
    where: dict = {}
    for r, o in zip(rows, out):
        if r["adapter"] is not None:
            served.setdefault(o["shard"], set()).add(r["adapter"])
            where.setdefault((r["document"], r["adapter"]), set()).add(o["shard"])
    assert set(served) == {"cpu0", "cpu1"} and all(len(s) <= 2 for s in served.values()), served
    assert set().union(*served.values()) == set(ADAPTERS)
    assert all(len(s) == 1 for s in where.values())  # each (document, adapter) on one shard
