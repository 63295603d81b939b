"""Per-row LoRA adapters with the fake engine (plumbing: each row's adapter reaches its row's request;
a missing or broken adapter is that row's error; rows start adapter by adapter; a job with an
adapter column on engines without LoRA is refused up front). The real engine's answers with
adapters: tests/engine/test_adapters_engine.py."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import Pipeline, load_config
from pipeline.data.errors import JobError
from pipeline.jobs.job import run_job
from pipeline.worker.grouped_answers import adapter_order


def _adapter(folder, rank: int = 8, weights: bool = True):
    """A folder that passes the workers' checks (the fake engine loads nothing), or with weights
    that cannot be read."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": rank}))
    if weights:
        save_file({"q_proj.lora_A.weight": np.zeros((rank, 4), np.float32)}, str(folder / "adapter_model.safetensors"))
    else:
        (folder / "adapter_model.safetensors").write_bytes(b"not safetensors")
    return folder


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    return {
        "terse": _adapter(root / "terse"),
        "other": _adapter(root / "other"),
        "wide": _adapter(root / "wide", rank=64),
        "empty": root / "empty",
        "torn": _adapter(root / "torn", weights=False),
    }


@pytest.fixture(scope="module")
def fake_pipeline(adapters):
    (adapters["empty"]).mkdir()
    config = load_config().replace(
        scheduler={"dashboard_address": None}, model={"adapters": {"terse": str(adapters["terse"])}}
    )
    with Pipeline(config, engine="fake") as p:
        yield p


def test_each_rows_adapter_answers_its_row_and_bad_adapters_are_row_errors(fake_pipeline, adapters, tmp_path):
    other, wide, empty = str(adapters["other"]), str(adapters["wide"]), str(adapters["empty"])
    torn = str(adapters["torn"])
    names = ["terse", other, None, "nosuch", wide, "terse", empty, other, torn]
    src = tmp_path / "in.parquet"
    pq.write_table(
        pa.table(
            {
                "document": [f"doc {k % 3}" for k in range(len(names))],
                "question": [f"q{k}" for k in range(len(names))],
                "adapter": names,
            }
        ),
        src,
    )
    run_job(fake_pipeline, src, tmp_path / "out.parquet", progress=False)
    rows = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [r["id"] for r in rows] == list(range(len(names)))
    for name, row in zip(names, rows):
        if name in ("terse", other):
            assert row["error"] is None and row["answer"] == name  # (the fake engine answers with the adapter)
        elif name is None:
            assert row["error"] is None and row["answer"] == ""
    assert rows[3]["error"] == "input: adapter 'nosuch' is not a name in model.adapters (terse) nor a folder"
    assert rows[4]["error"] == f"input: adapter {wide!r} has rank 64, more than engine.max_lora_rank (16)"
    assert rows[6]["error"] == f"input: adapter {empty!r}: {empty} has no adapter_config.json (a PEFT adapter's folder)"
    assert rows[8]["error"].startswith(f"input: adapter {torn!r}: {torn}/adapter_model.safetensors cannot be read: ")


def test_rows_start_adapter_by_adapter_each_adapters_documents_in_order():
    digests = np.array([5, 5, 5, 9, 9, 2], np.uint64)
    rows = pa.table({"adapter": ["b", "a", "b", None, "a", "b"]})
    order, group = adapter_order(rows, digests)
    assert order.tolist() == [0, 2, 5, 1, 4, 3]  # b: documents 5, 2; a: 5, 9; none: 9
    assert group.tolist() == [0, 0, 2, 3, 4, 7]  # five groups: (b, 5), (b, 2), (a, 5), (a, 9), (none, 9)
    plain, groups = adapter_order(pa.table({"x": [1] * 6}), digests)
    assert plain.tolist() == list(range(6)) and groups.tolist() == [0, 0, 0, 1, 1, 2]


def test_an_adapter_column_on_engines_without_lora_is_refused_up_front(tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"document": ["d"], "question": ["q"], "adapter": ["x"]}), src)
    from pipeline.jobs.job import prepare_job

    with pytest.raises(JobError, match="has an adapter column, and this config's engines run without adapters"):
        prepare_job(src, tmp_path / "out.parquet", config=load_config())
    assert load_config().replace(model={"adapters": {"a": "/x"}}).lora_slots == 2
    assert load_config().replace(engine={"max_loras": 3}).lora_slots == 3


def test_an_openai_batch_requests_model_naming_an_adapter_answers_with_it(fake_pipeline, tmp_path):
    def line(custom_id, model):
        return (
            json.dumps(
                {
                    "custom_id": custom_id,
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": {"model": model, "messages": [{"role": "user", "content": "hi"}]},
                }
            )
            + "\n"
        )

    src = tmp_path / "batch.jsonl"
    src.write_text(line("a", "terse") + line("b", "SmolLM2-135M-Instruct") + line("c", "terse"))
    run_job(fake_pipeline, src, tmp_path / "out.jsonl", progress=False)
    out = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    answers = {o["custom_id"]: o["response"]["body"]["choices"][0]["message"]["content"] for o in out}
    assert answers == {"a": "terse", "b": "", "c": "terse"}  # (the fake engine answers with the adapter's name)
