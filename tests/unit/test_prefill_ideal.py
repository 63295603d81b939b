"""The least-prefill reference the benchmark compares against (pipeline/bench/prefill_ideal.py)."""

import random

from pipeline.bench.prefill_ideal import block_ideal, token_ideal


def test_each_distinct_token_prefix_counts_once():
    # trie nodes: 1 2 3 4 | 5 (under 1 2 3) | 6 (under 1 2) -> 6
    prompts = [[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 6]]
    assert token_ideal(prompts) == 6
    # a shared head (1 2) is computed once more on a second shard, not once per prompt
    assert token_ideal(prompts, shards=2) == 8
    assert token_ideal(prompts, shards=8) == 6 + 2 * 2  # at most one shard per prompt


def test_shared_template_head_is_not_counted_per_document():
    head = list(range(100, 164))  # the chat template's system turn, shared by every prompt
    docs = [[d] * 50 for d in range(10)]
    prompts = [head + doc + [q] for doc in docs for q in (1, 2, 3)]
    # head once, each document once, each question once
    assert token_ideal(prompts) == 64 + 10 * 50 + 30
    assert token_ideal([]) == 0


def test_blocks_reuse_full_chains_only_and_always_compute_the_partial_tail():
    prompts = [[1, 2, 3, 4, 9], [1, 2, 3, 4, 8], [1, 2, 7, 7, 7]]
    # p1: blocks (1 2), (3 4) new + tail 1; p2: both cached + tail 1; p3: (1 2) cached, (7 7) new + tail 1
    assert block_ideal(prompts, 2) == 5 + 1 + 3
    assert block_ideal(prompts, 2, shards=2) == 9 + 2  # the common head's one full block again
    # a block is only reusable after the same chain: (1 2) at position 1 is not (1 2) at position 0
    assert block_ideal([[5, 6, 1, 2], [1, 2, 3]], 2) == 4 + 3


def test_block_ideal_never_below_token_ideal():
    rng = random.Random(0)
    for _ in range(50):
        stems = [[rng.randrange(4) for _ in range(rng.randrange(1, 20))] for _ in range(3)]
        prompts = [rng.choice(stems) + [rng.randrange(4) for _ in range(rng.randrange(0, 6))] for _ in range(8)]
        for bs in (1, 2, 4, 32):
            assert block_ideal(prompts, bs) >= token_ideal(prompts)
        assert block_ideal(prompts, 1) == token_ideal(prompts)
