"""Placement of rows that name LoRA adapters (pipeline/steps/placement.py, adapter_keys.py): a
document under an adapter is a placement key of its own; where a job's adapters are more than an
engine's LoRA slots (``max_loras``), each shard serves at most ``max_loras`` of them (or, past
shards × ``max_loras``, ``ceil(adapters / shards)``), loads stay within the balance bound, an
adapter too costly for one shard is cut across shards, the base model's rows level the loads, a
shard's buckets take its adapters one after another; without adapters nothing changes."""

import hashlib

import numpy as np
import pyarrow as pa
import pytest

from pipeline.prefix_memory import prefix_digest
from pipeline.steps.adapter_keys import adapter_code
from pipeline.steps.cluster_tasks import place_task
from pipeline.steps.placement import place_documents, spread
from pipeline.steps.prompt_table import prompt_rows_from

BALANCE = 1.25  # place_documents' default bound: no shard above this × its fair share


def _job(n_adapters: int, n: int = 600, seed: int = 1, weights=None, base: float = 0.0):
    """``n`` documents, each under one of ``n_adapters`` adapters (codes 1..; ``weights``: how
    likely each), a ``base`` share of them under none (code 0)."""
    rng = np.random.default_rng(seed)
    digests = rng.permutation(np.arange(1, n + 1, dtype=np.uint64) * np.uint64(2**40 + 7))
    rows = rng.integers(1, 5, n)
    cost = rows * 100.0 + rng.integers(500, 2500, n)
    adapters = rng.choice(np.arange(1, n_adapters + 1, dtype=np.uint64), n, p=weights)
    adapters[rng.random(n) < base] = 0
    return digests, rows, cost, adapters


def _per_shard(p, digests, cost, adapters):
    """Each shard's load and adapters (the base model's not counted), from a placement."""
    shard = {b.index: b.shard for b in p.buckets}
    load, served = {}, {}
    for d, c, a in zip(digests, cost, adapters):
        s = shard[int(p.bucket_of(np.array([d], np.uint64))[0])]
        load[s] = load.get(s, 0.0) + c
        if a:
            served.setdefault(s, set()).add(int(a))
    return load, served


def _check_balanced(load, cost, shards):
    fair = cost.sum() / shards
    assert len(load) == shards and max(load.values()) <= BALANCE * fair, (load, fair)


def test_four_adapters_on_two_shards_of_two_slots_each_serve_two_balanced():
    digests, rows, cost, adapters = _job(4)
    p = place_documents(digests, rows, cost, ["a", "b"], bucket_rows=200, adapters=adapters, max_loras=2)
    load, served = _per_shard(p, digests, cost, adapters)
    assert all(len(s) <= 2 for s in served.values()) and set().union(*served.values()) == {1, 2, 3, 4}
    _check_balanced(load, cost, 2)
    assert sum(b.rows for b in p.buckets) == rows.sum()


def test_five_adapters_on_two_by_two_slots_serve_the_fewest_the_count_allows():
    """More adapters than shards × slots: each shard serves at most ceil(5 / 2) = 3, and no more
    slots are used than that cap allows (5 adapters, one cut across both shards at most)."""
    digests, rows, cost, adapters = _job(5)
    p = place_documents(digests, rows, cost, ["a", "b"], bucket_rows=200, adapters=adapters, max_loras=2)
    load, served = _per_shard(p, digests, cost, adapters)
    assert all(len(s) <= 3 for s in served.values()) and set().union(*served.values()) == {1, 2, 3, 4, 5}
    assert sum(len(s) for s in served.values()) <= 6
    _check_balanced(load, cost, 2)


def test_a_skewed_adapter_is_split_across_shards_the_rest_keep_to_one():
    """One adapter with most of the job's cost: cut across both shards (balance), the two small
    ones on one shard each, so each shard serves two adapters."""
    digests, rows, cost, adapters = _job(3, weights=[0.8, 0.1, 0.1])
    p = place_documents(digests, rows, cost, ["a", "b"], bucket_rows=200, adapters=adapters, max_loras=2)
    load, served = _per_shard(p, digests, cost, adapters)
    assert served["a"] & served["b"] == {1} and all(len(s) == 2 for s in served.values())
    _check_balanced(load, cost, 2)
    # where one shard could take it all, an adapter is not cut
    share = spread(np.array([30.0, 30.0, 20.0, 20.0]), 2, 2, 50.0)
    assert [len(q) for q in share] == [1, 1, 1, 1] and sorted(sum(q.values()) for q in share) == [20, 20, 30, 30]
    assert [len(q) for q in spread(np.array([100.0, 1.0, 1.0]), 2, 2, 51.0)] == [2, 1, 1]


def test_base_model_rows_take_no_slot_and_level_the_loads():
    digests, rows, cost, adapters = _job(6, n=900, base=0.4, weights=[0.3, 0.2, 0.2, 0.1, 0.1, 0.1])
    shards = ["a", "b", "c"]
    p = place_documents(digests, rows, cost, shards, bucket_rows=150, adapters=adapters, max_loras=2)
    load, served = _per_shard(p, digests, cost, adapters)
    assert all(len(s) <= 2 for s in served.values())
    fair = cost.sum() / 3
    assert max(load.values()) / fair < 1.05  # (the base model's rows fill what the adapters leave)


def test_a_shards_buckets_take_its_adapters_one_after_another():
    digests, rows, cost, adapters = _job(4, n=800)
    p = place_documents(digests, rows, cost, ["a", "b"], bucket_rows=60, adapters=adapters, max_loras=2)
    order = np.argsort(digests)
    adapter_of = adapters[order]
    for shard in ("a", "b"):
        numbers = [b.index for b in p.buckets if b.shard == shard]
        assert len(numbers) > 4
        sequence = []  # the shard's adapters, bucket after bucket
        for n in numbers:
            sequence += sorted(set(adapter_of[p.bucket == n].tolist()))
        runs = [a for k, a in enumerate(sequence) if k == 0 or sequence[k - 1] != a]
        assert len(runs) == len(set(runs))  # each adapter's documents in consecutive buckets
        assert all(len(set(adapter_of[p.bucket == n].tolist())) <= 2 for n in numbers)


def test_a_held_document_stays_on_the_shard_that_serves_its_adapter():
    digests, rows, cost, adapters = _job(4)
    free = place_documents(digests, rows, cost, ["a", "b"], bucket_rows=200, adapters=adapters, max_loras=2)
    _, served = _per_shard(free, digests, cost, adapters)
    k = int(np.flatnonzero(adapters == 1)[0])
    there = next(s for s, a in served.items() if 1 in a)
    held = place_documents(
        digests, rows, cost, ["a", "b"], {int(digests[k]): there}, bucket_rows=200, adapters=adapters, max_loras=2
    )
    shard = {b.index: b.shard for b in held.buckets}
    assert shard[int(held.bucket_of(digests[k : k + 1])[0])] == there


def _fingerprint(p) -> str:
    h = hashlib.sha256()
    h.update(p.digests.tobytes())
    h.update(p.bucket.tobytes())
    h.update(repr([(b.index, b.shard, b.rows, b.documents) for b in p.buckets]).encode())
    for d in sorted(p.split):
        h.update(np.uint64(d).tobytes())
        h.update(p.split[d].tobytes())
    return h.hexdigest()


# place_documents' placement of this job before adapters were placed (commit 98e4461)
BEFORE_ADAPTERS = "5f137b4f9d0e5ae155efd0d41b34d1c669bdd1dd2407225e01c714d662b21bab"


def test_without_adapters_placement_is_unchanged_byte_for_byte():
    rng = np.random.default_rng(44)
    n = 3000
    digests = rng.permutation(np.arange(n, dtype=np.uint64) * np.uint64(2**40 + 7) + np.uint64(99))
    rows = rng.integers(1, 6, n)
    rows[:3] = 5000  # (split documents)
    cost = rows * 90.0 + rng.integers(500, 3000, n)
    held = {int(digests[10]): "b", int(digests[11]): "c", int(digests[12]): "gone"}
    args = (digests, rows, cost, ["a", "b", "c"], held)
    kw = {"bucket_rows": 700, "prefix_cost": cost - rows * 90.0}
    assert _fingerprint(place_documents(*args, **kw)) == BEFORE_ADAPTERS
    assert _fingerprint(place_documents(*args, **kw, adapters=np.zeros(n, np.uint64), max_loras=2)) == BEFORE_ADAPTERS
    # adapters no more than an engine's slots: placed as without them (each shard may serve all)
    two = place_documents(*args, **kw, adapters=np.where(rng.random(n) < 0.5, 1, 2).astype(np.uint64), max_loras=2)
    plain = place_documents(*args, **kw)
    assert [two.buckets[b].shard for b in two.bucket] == [plain.buckets[b].shard for b in plain.bucket]


def _rows(adapter):
    prefix = pa.array(["doc one", "doc one", "doc two", "doc one", "doc two"], pa.large_string())
    suffix = pa.array(["q0", "q1", "q2", "q3", "q4"], pa.large_string())
    return prompt_rows_from(
        prefix,
        suffix,
        pa.nulls(5, pa.string()),
        pa.array(np.arange(5, dtype=np.int64)),
        {} if adapter is None else {"adapter": adapter},
    )


def test_a_document_under_each_adapter_is_a_placement_key_of_its_own():
    plain = _rows(None)
    assert _rows(pa.nulls(5, pa.string())).rows.column("digest").equals(plain.rows.column("digest"))
    assert _rows(pa.nulls(5, pa.string())).documents.equals(plain.documents)
    assert plain.documents.column("adapter").to_pylist() == [0, 0]
    got = _rows(pa.array(["x", None, "x", "y", None]))
    digest = got.rows.column("digest").to_pylist()
    one, two = prefix_digest("doc one"), prefix_digest("doc two")
    assert digest[1] == one and digest[4] == two  # (no adapter: the prefix's digest, as before)
    assert len({digest[0], digest[1], digest[3]}) == 3 and digest[2] not in (two, digest[0])
    assert got.rows.column("prefix").to_pylist() == ["doc one"] * 2 + ["doc two", "doc one", "doc two"]
    codes = dict(zip(got.documents.column("digest").to_pylist(), got.documents.column("adapter").to_pylist()))
    x, y = adapter_code(pa.array(["x", "y"])).tolist()
    assert codes == {digest[0]: x, digest[1]: 0, digest[2]: x, digest[3]: y, digest[4]: 0}
    assert _rows(pa.array(["x", None, "x", "y", None]).dictionary_encode()).rows.column("digest").to_pylist() == digest
    # counted over partitions and placed by place_task with the engines' slots
    placement = place_task(["a", "b"], {}, 10, 0, got.documents, got.documents.slice(0, 2), max_loras=1)
    assert sorted(placement.digests.tolist()) == sorted(set(digest))
    shards_of = {}
    for d, a in codes.items():
        if a:
            shards_of.setdefault(
                placement.buckets[int(placement.bucket_of(np.array([d], np.uint64))[0])].shard, set()
            ).add(a)
    assert all(len(s) == 1 for s in shards_of.values()) and len(shards_of) == 2


@pytest.mark.parametrize("shards,slots,n", [(2, 2, 4), (2, 2, 5), (3, 2, 7), (4, 1, 9), (3, 3, 4)])
def test_spread_keeps_each_shard_within_its_slots(shards, slots, n):
    rng = np.random.default_rng(n)
    costs = rng.pareto(1.5, n) * 10 + 1
    cap = slots if n <= shards * slots else -(-n // shards)
    share = spread(costs, shards, cap, costs.sum() / shards)
    per_shard = [sum(s in q for q in share) for s in range(shards)]
    assert max(per_shard) <= cap
    assert np.allclose([sum(q.values()) for q in share], costs)
