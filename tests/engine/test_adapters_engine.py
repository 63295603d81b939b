"""Per-row LoRA adapters on the real engine (issue 44): every row answered with its own adapter
gets exactly plain vLLM's answer for that row's prompt and ``LoRARequest`` (plain ``vllm.LLM`` in
its own process, pipeline/bench/standalone.py); the adapters change the answers; a missing
adapter is its row's error and the engines keep serving."""

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import Pipeline, load_config
from pipeline.bench.adapters import make_adapter
from pipeline.bench.standalone import StandaloneShards
from pipeline.bench.workloads import document_questions
from pipeline.jobs.job import run_job
from pipeline.model import resolve_model


@pytest.mark.own_cluster
def test_each_row_answered_with_its_adapter_as_plain_vllm_answers_it(tmp_path):
    base = load_config()
    model = resolve_model(base)
    folders = {name: make_adapter(model, tmp_path / name, seed) for name, seed in (("a1", 1), ("a2", 2))}
    # float32: answers compared token for token between engines whose batches differ
    config = base.replace(
        scheduler={"dashboard_address": None},
        model={"adapters": folders},
        engine={"max_loras": 2, "dtype": "float32"},
        sampling={"max_tokens": 16},
    )
    rows = document_questions(4, 3, seed=3)
    rng = random.Random(0)
    for k, row in enumerate(rows):
        row["id"] = k
        row["adapter"] = rng.choice(["a1", "a2", folders["a1"], None])
    rows[5]["adapter"] = str(tmp_path / "missing")
    src = tmp_path / "in.parquet"
    pq.write_table(
        pa.Table.from_pylist([{k: r[k] for k in ("id", "document", "question", "adapter")} for r in rows]), src
    )
    with Pipeline(config) as pipeline:
        run_job(pipeline, src, tmp_path / "out.parquet", progress=False, sampling={"logprobs": True, "top_logprobs": 3})
        out = pq.read_table(tmp_path / "out.parquet").to_pylist()

        def encode(text):
            return pipeline.tokenizer.encode(text, add_special_tokens=False)

        prompts = []
        for r in rows:
            parts = pipeline.task.split(r)
            prompts.append(encode(parts.prefix) + encode(parts.suffix))
    assert (
        out[5]["error"] == f"input: adapter {rows[5]['adapter']!r}: {rows[5]['adapter']} has no "
        f"adapter_config.json (a PEFT adapter's folder)"
    )
    kept = [k for k in range(len(rows)) if k != 5]
    assert all(out[k]["error"] is None for k in kept)

    def folder(name):
        return None if name is None else folders.get(name, name)

    with StandaloneShards(config, model) as shards:
        name = shards.shards[0]
        # every row with its own adapter, and with each adapter (and none) in turn
        _, _, own, _ = shards.run({name: [(prompts[k], folder(rows[k]["adapter"])) for k in kept]})
        each = {
            a: shards.run({name: [(prompts[k], folders.get(a)) for k in kept]})[2][name] for a in ("a1", "a2", None)
        }
    got = [out[k]["answer"] for k in kept]
    # Token for token as plain vLLM answers each row with its adapter, except where our engine saw a near
    # tie and took the other side (vLLM is not batch-invariant, and the two engines' batches differ:
    # seen, "favorite" for "favourite"): at the first token that differs, plain vLLM's continuation is one
    # of our top alternatives, within 0.1 of our choice's log-probability. (Rows without adapter batched
    # beside rows with one got the last adapter's delta on CPU, in plain vLLM too, before
    # pipeline/cpu_lora_fix.py: 3 of 11 rows differed in CI.)
    for i, k in enumerate(kept):
        assert _agrees(out[k]["logprobs"], own[name][i].text), (k, out[k]["answer"], own[name][i].text)
    own = [o.text.strip() for o in own[name]]
    # ... and never another adapter's answer: no row's answer is another adapter's (where that differs
    # from its own adapter's), and every adapter (and none) has rows answered exactly as plain vLLM
    # answers them with it and unlike the others (a nearest-answer rule is too strict: seen, a row
    # without adapter tipped at a near tie into an answer closer to a1's than to the base model's)
    exact = set()
    for i, k in enumerate(kept):
        mine = folders.get(rows[k]["adapter"], rows[k]["adapter"]) if rows[k]["adapter"] else None
        mine = next(a for a in ("a1", "a2", None) if folders.get(a) == mine)
        others = {each[a][i].text.strip() for a in each if a != mine} - {each[mine][i].text.strip()}
        assert got[i] not in others, (k, mine, got[i])
        if got[i] == each[mine][i].text.strip() and others:
            exact.add(mine)
    assert exact == {"a1", "a2", None}, exact
    # the adapters change the answers
    assert sum(each["a1"][i].text != each[None][i].text for i in range(len(kept))) >= len(kept) // 2
    assert sum(each["a2"][i].text != each["a1"][i].text for i in range(len(kept))) >= len(kept) // 2


def _agrees(tokens: list[dict], plain: str, margin: float = 0.1) -> bool:
    """Whether our answer's ``tokens`` spell ``plain`` up to a near tie our engine broke the other way."""
    text = ""
    for t in tokens:
        if plain.startswith(text + t["token"]):
            text += t["token"]
            continue
        rest = plain[len(text) :]
        if not rest:  # plain vLLM stopped here; ours ends with its end-of-turn token
            return t is tokens[-1]
        return any(
            x["token"] and rest.startswith(x["token"]) and t["logprob"] - x["logprob"] <= margin
            for x in t["top_logprobs"]
            if x["token"] != t["token"]
        )
    return True
