"""The fake engine's prefix-cache model: what an LRU prefix cache of a given size serves."""

import pytest

from pipeline.worker.prefix_cache_model import PrefixCacheModel


def ids(tag: int, n: int, start: int = 0) -> list[int]:
    return [tag * 1000 + start + i for i in range(n)]


def test_a_repeated_prefix_is_served_in_whole_blocks_and_never_the_last_token():
    cache = PrefixCacheModel(capacity_blocks=100, block_size=16)
    doc = ids(1, 64)
    assert cache.serve(doc + ids(2, 10)) == 0  # cold
    assert cache.serve(doc + ids(3, 10)) == 64  # the document's 4 blocks
    assert cache.serve(doc + ids(2, 10)) == 64  # 74 tokens: the 5th block is not full
    exact = ids(4, 96)
    cache.serve(exact)
    assert cache.serve(exact) == 80  # all 6 blocks cached, the last token computed


def test_blocks_are_chained_a_block_elsewhere_is_no_hit():
    cache = PrefixCacheModel(capacity_blocks=100, block_size=16)
    a, b = ids(1, 16), ids(2, 16)
    cache.serve(a + b + ids(9, 1))
    assert cache.serve(b + a + ids(9, 1)) == 0
    assert cache.serve(a + ids(5, 17)) == 16


def test_least_recently_used_blocks_go_first_a_documents_tail_before_its_head():
    cache = PrefixCacheModel(capacity_blocks=6, block_size=16)
    a, b = ids(1, 64), ids(2, 64)
    cache.serve(a + [7])
    cache.serve(b + [7])  # 8 blocks for 6: two of a's go, its last two
    assert len(cache._blocks) == 6
    assert cache.serve(a + [8]) == 32
    cache.reset()
    assert cache.serve(b + [8]) == 0


def test_no_capacity_serves_nothing_and_bad_sizes_are_refused():
    assert PrefixCacheModel(0, 16).serve(ids(1, 100)) == 0
    with pytest.raises(ValueError):
        PrefixCacheModel(4, 0)
