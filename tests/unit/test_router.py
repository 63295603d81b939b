import random

import pytest

from pipeline.client.router import Prefix, PrefixRouter, block_hashes, text_block_hashes


def doc(seed, n=160):
    rng = random.Random(seed)
    return [rng.randrange(50_000) for _ in range(n)]


def test_block_hashes_are_chained_and_deterministic():
    a = block_hashes(list(range(40)), 16)
    assert len(a) == 2  # the partial third block is not hashed
    assert a == block_hashes(list(range(40)), 16)
    b = block_hashes([99] + list(range(1, 40)), 16)
    assert a[0] != b[0] and a[1] != b[1]  # a change in block 0 changes every later hash


def test_text_blocks_are_chained_and_a_shared_head_shares_its_blocks():
    head = "You answer from the document. " * 8              # 240 characters
    a, b = head + "Document one. " * 20, head + "Document two. " * 20
    ha, hb = text_block_hashes(a, 64), text_block_hashes(b, 64)
    assert len(ha) == len(a) // 64 and list(ha) == list(text_block_hashes(a, 64))
    assert ha[:3] == hb[:3] and ha[3] != hb[3]   # 3 whole blocks of shared head, then they part
    p = Prefix.of_text(a, block_size=16, chars_per_token=4.0)
    assert p.length == round(len(a) / 4) and list(p.hashes) == list(ha)


def test_documents_hashed_by_characters_follow_their_first_question():
    r = PrefixRouter(["a", "b", "c"], block_size=16)
    docs = [Prefix.of_text(f"Document {i}: " + "words of the document " * 40, 16, 4.2) for i in range(9)]
    first = {i: r.route(d, suffix_len=10).shard for i, d in enumerate(docs)}
    assert set(first.values()) == {"a", "b", "c"}
    for i, d in enumerate(docs):
        assert r.route(d, suffix_len=10).shard == first[i]


def test_questions_on_a_document_follow_it():
    r = PrefixRouter(["a", "b", "c"], block_size=16)
    docs = [doc(i) for i in range(9)]
    first = {i: r.route(d, suffix_len=10).shard for i, d in enumerate(docs)}
    for _ in range(3):
        for i, d in enumerate(docs):
            assert r.route(d, suffix_len=10).shard == first[i]


def test_unseen_documents_spread_by_outstanding_work():
    r = PrefixRouter(["a", "b"], block_size=16)
    shards = [r.route(doc(i), suffix_len=10).shard for i in range(10)]
    assert shards.count("a") == 5 and shards.count("b") == 5


def test_longest_match_prefers_shard_holding_more_of_the_prefix():
    r = PrefixRouter(["a", "b"], block_size=16)
    head = doc(1, 64)
    r.route(head + doc(2, 96))            # goes to a
    r.route(doc(3, 160))                  # goes to b (a is busier)
    route = r.route(head + doc(2, 96)[:48] + doc(4, 48))
    assert route.shard == "a" and route.cached_tokens == 64 + 48


def test_shared_system_prompt_does_not_pull_everything_to_one_shard():
    r = PrefixRouter(["a", "b", "c", "d"], block_size=16)
    system = doc(0, 32)
    counts = {}
    for i in range(40):
        s = r.route(system + doc(100 + i, 320)).shard
        counts[s] = counts.get(s, 0) + 1
    assert sorted(counts.values()) == [10, 10, 10, 10]


def test_imbalance_guard_moves_work_off_an_overloaded_owner():
    r = PrefixRouter(["a", "b"], block_size=16, imbalance_abs=500, imbalance_ratio=1.5)
    hot = doc(7, 64)
    shards = [r.route(hot, suffix_len=32).shard for _ in range(20)]
    # the first costs 96 (64 prefill + 32), each repeat 32 on the owner; once it is more than
    # 500 tokens ahead of the idle shard (96 + 32 * 13 = 512), the other shard takes it too
    assert shards[:14] == ["a"] * 14 and shards[14] == "b"


def test_owner_keeps_its_document_within_the_thresholds():
    r = PrefixRouter(["a", "b"], block_size=128)
    docs = [doc(i, 255) for i in range(12)]  # one full block each plus a long tail
    owner = {i: r.route(d, suffix_len=10, decode_tokens=32).shard for i, d in enumerate(docs)}
    for _ in range(3):
        for i, d in enumerate(docs):
            assert r.route(d, suffix_len=10, decode_tokens=32).shard == owner[i]


def test_done_releases_outstanding_work():
    r = PrefixRouter(["a", "b"], block_size=16)
    route = r.route(doc(1), suffix_len=10, decode_tokens=5)
    assert r.outstanding["a"] == route.cost == 160 + 10 + 5
    r.done(route)
    assert r.outstanding["a"] == 0


def test_memory_is_bounded_by_lru():
    r = PrefixRouter(["a", "b"], block_size=16, max_blocks=50)
    for i in range(100):
        r.route(doc(i))
    assert len(r) == 50


def test_forget_shard_drops_its_cache():
    r = PrefixRouter(["a", "b"], block_size=16)
    d = doc(1)
    assert r.route(d).shard == "a"
    r.forget_shard("a")
    r.outstanding["b"] = 100
    route = r.route(d)
    assert route.shard == "a" and route.cached_tokens == 0


def test_bad_shards_rejected():
    with pytest.raises(ValueError):
        PrefixRouter([])
    with pytest.raises(ValueError):
        PrefixRouter(["a", "a"])


def test_a_shard_taken_out_of_routing_gets_nothing_and_the_last_cannot_be_taken_out():
    r = PrefixRouter(["a", "b"], block_size=4)
    doc = list(range(40))
    owner = r.route(doc, 2).shard
    r.set_down(owner)
    other = "b" if owner == "a" else "a"
    assert {r.route(doc, 2).shard for _ in range(5)} == {other}  # its document moves to the survivor
    assert {r.route(list(range(100, 140)), 2).shard for _ in range(3)} == {other}
    with pytest.raises(RuntimeError):
        r.set_down(other)
    r.set_down(owner, False)
    assert r.live_shards == ["a", "b"]


def test_blocks_held_follows_remembering_forgetting_and_eviction():
    r = PrefixRouter(["a", "b"], block_size=4, max_blocks=12)
    r.route(list(range(40)), 0)        # 10 blocks on its shard
    shard = max(r.blocks_held, key=r.blocks_held.get)
    assert r.blocks_held[shard] == 10
    r.route(list(range(1000, 1020)), 0)  # 5 more blocks: the LRU keeps 12
    assert sum(r.blocks_held.values()) == len(r) == 12
    r.forget_shard(shard)
    assert r.blocks_held[shard] == 0 and sum(r.blocks_held.values()) == len(r)


def test_routing_a_documents_rows_together_chooses_as_routing_them_one_by_one():
    import random

    from pipeline.client.router import Prefix

    rng = random.Random(4)
    system = list(range(5000, 5064))
    docs = [system + [d * 1000 + j for j in range(rng.choice([40, 200, 900]))] for d in range(30)]
    groups = [(rng.randrange(30), [rng.randrange(1, 40) for _ in range(rng.choice([1, 4, 40]))]) for _ in range(60)]
    one, many = (PrefixRouter(["a", "b", "c"], block_size=16, imbalance_abs=512) for _ in range(2))
    for d, suffixes in groups:
        singles = [one.route(docs[d], suffix_len=s, decode_tokens=8) for s in suffixes]
        together = many.route_rows(Prefix.of(docs[d], 16), suffixes, 8)
        assert together == singles
        for r in singles[::3]:   # some finish meanwhile
            one.done(r)
        for r in together[::3]:
            many.done(r)
    assert one.outstanding == many.outstanding and one.blocks_held == many.blocks_held
    assert len({r.shard for d, s in groups for r in [one.route(docs[d], 1)]}) > 1
