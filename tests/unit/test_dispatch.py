import random

from pipeline.client.dispatch import Dispatcher
from pipeline.client.router import PrefixRouter


def tokens(seed, n=64):
    r = random.Random(seed)
    return [r.randrange(1000) for _ in range(n)]


def rows_of(bound):
    return [i for _, groups in bound for items in groups.values() for i, _ in items]


def make(late=True, cap=4, batch=3, shards=("a", "b")):
    return Dispatcher(PrefixRouter(list(shards), block_size=16), batch_size=batch, queue_per_shard=cap,
                      late_binding=late)


def test_scattered_questions_on_a_document_travel_together():
    d = make(late=False, batch=100)
    order = [0, 1, 2, 0, 1, 2, 0]  # document of each row, scattered
    for i, doc in enumerate(order):
        d.add(i, f"doc{doc}", f"q{i}", tokens(doc))
    bound = d.bind()
    for shard, groups in bound:
        for prefix, items in groups.items():
            idx = [i for i, _ in items]
            assert idx == sorted(idx)
    by_prefix = {p: (s, [i for i, _ in items]) for s, groups in bound for p, items in groups.items()}
    assert by_prefix["doc0"][1] == [0, 3, 6]
    assert sorted(rows_of(bound)) == list(range(7))


def test_late_binding_holds_back_work_until_a_shard_has_room():
    d = make(late=True, cap=4, batch=2)
    for doc in range(10):
        for q in range(2):
            d.add(doc * 2 + q, f"doc{doc}", "q", tokens(doc))
    first = rows_of(d.bind())
    assert len(first) == 8 and d.pending_rows == 12  # 4 rows per shard, the rest unbound
    assert d.in_flight == {"a": 4, "b": 4}
    # shard "b" finishes its rows: only "b" gets new documents
    done_b = [i for i in first if d.routes[i].shard == "b"]
    d.completed(done_b)
    more = d.bind()
    assert {s for s, _ in more} == {"b"} and len(rows_of(more)) == 4


def test_late_bound_siblings_follow_their_document():
    d = make(late=True, cap=2, batch=1)
    d.add(0, "doc0", "q0", tokens(0))
    d.add(1, "doc1", "q1", tokens(1))
    bound = d.bind()
    owner = {p: s for s, g in bound for p in g}
    d.completed([0, 1])
    d.add(2, "doc1", "q2", tokens(1))  # a later question on doc1 arrives
    (shard, groups), = d.bind()
    assert shard == owner["doc1"] and list(groups) == ["doc1"]


def test_batches_respect_size_and_carry_each_prefix_once():
    d = make(late=False, batch=4)
    for i in range(10):
        d.add(i, "same", f"q{i}", tokens(0))
    bound = d.bind()
    assert [sum(len(v) for v in g.values()) for _, g in bound] == [4, 4, 2]
    assert all(list(g) == ["same"] for _, g in bound)


def test_every_row_bound_exactly_once_under_random_completion():
    rng = random.Random(3)
    d = make(late=True, cap=5, batch=3, shards=("a", "b", "c"))
    for i in range(200):
        doc = rng.randrange(30)
        d.add(i, f"doc{doc}", f"q{i}", tokens(doc))
    seen, outstanding = [], []
    while True:
        got = rows_of(d.bind())
        seen += got
        outstanding += got
        if not outstanding:
            break
        rng.shuffle(outstanding)
        done, outstanding = outstanding[:4], outstanding[4:]
        d.completed(done)
    assert sorted(seen) == list(range(200)) and d.pending_rows == 0
    assert all(v == 0 for v in d.in_flight.values())


def test_without_grouping_rows_are_bound_in_arrival_order():
    d = Dispatcher(PrefixRouter(["a"], block_size=16), batch_size=100, queue_per_shard=100, group=False)
    for i, doc in enumerate([0, 1, 0, 1]):
        d.add(i, f"doc{doc}", f"q{i}", tokens(doc))
    (_, groups), = d.bind()
    assert [i for items in groups.values() for i, _ in items] == [0, 2, 1, 3]  # batch still ships each doc once
    assert d.pending_rows == 0


def test_token_budget_keeps_a_shard_within_its_kv_cache():
    router = PrefixRouter(["a", "b"], block_size=16)
    d = Dispatcher(router, batch_size=100, queue_per_shard=100, token_budget={"a": 100, "b": 100})
    for doc in range(6):
        d.add(doc, f"doc{doc}", "q", tokens(doc))  # each costs 65 tokens: 64 of prefix, 1 of question
    bound = rows_of(d.bind())
    # a shard takes documents while its outstanding tokens are under 100: two each
    assert len(bound) == 4 and d.pending_rows == 2
    assert router.outstanding == {"a": 130, "b": 130}
    d.completed(bound)
    assert len(rows_of(d.bind())) == 2  # room again once the work is done


def _hot_document_burst(d, singles=5):
    """A hot document's 6 questions, then ``singles`` documents of one question each."""
    for q in range(6):
        d.add(q, "hot", f"q{q}", tokens(0))
    for k in range(singles):
        d.add(6 + k, f"doc{k}", "q", tokens(k + 1))


def _placement(bound):
    return {i: shard for shard, groups in bound for items in groups.values() for i, _ in items}


def test_last_rows_that_fit_the_queues_together_are_bound_at_once_as_a_static_split():
    # The hot document fills shard "a"'s queue by rows while "a" is the least loaded by work:
    # with more input to come, binding waits for "a" to have room.
    waiting = make(late=True, cap=6, batch=100)
    _hot_document_burst(waiting)
    waiting.bind()
    assert waiting.pending_rows > 0
    # Once the input has ended and all 11 rows fit in the two queues (2 x 6), none waits, and
    # each goes where a client routing the whole burst up front sends it.
    ended = make(late=True, cap=6, batch=100)
    _hot_document_burst(ended)
    ended.input_ended = True
    placed = _placement(ended.bind())
    assert ended.pending_rows == 0 and sorted(placed) == list(range(11))
    static = make(late=False, cap=6, batch=100)
    _hot_document_burst(static)
    assert placed == _placement(static.bind())


def test_last_rows_that_do_not_fit_the_queues_still_wait_for_room():
    d = make(late=True, cap=6, batch=100)
    _hot_document_burst(d, singles=7)   # 13 rows, 12 places
    d.input_ended = True
    first = rows_of(d.bind())
    assert d.pending_rows == 13 - len(first) > 0
    assert max(d.in_flight.values()) <= 6 + 1   # a shard's queue, and at most the group that crossed it


def _sizes(bound):
    return {shard: sorted(sum(len(items) for items in groups.values()) for s, groups in bound if s == shard)
            for shard in {s for s, _ in bound}}


def test_last_rows_go_in_no_more_batches_than_the_worker_runs_at_once():
    # 40 documents x 3 questions, all read (a burst): a batch beyond the worker's 4 slots would
    # wait for a whole other batch to end before its rows reached the engine.
    def burst(running=None):
        d = Dispatcher(PrefixRouter(["a", "b"], block_size=16), batch_size=8, queue_per_shard=64,
                       worker_slots=4)
        for doc in range(40):
            for q in range(3):
                d.add(doc * 3 + q, f"doc{doc}", f"q{q}", tokens(doc))
        d.input_ended = True
        return d.bind(running)

    bound = burst()
    assert sorted(rows_of(bound)) == list(range(120))
    for shard, sizes in _sizes(bound).items():
        assert len(sizes) == 4 and sizes[-1] - sizes[0] <= 1, sizes   # 4 batches, near-equal
    for _, groups in bound:   # within a batch, each document's rows in input order
        for items in groups.values():
            assert [i for i, _ in items] == sorted(i for i, _ in items)
    # "a" already runs 3 batches: its last rows go in the one slot left; "b" runs 4: no slot
    # is free, so its rows go in batches of at most 8, as while the input lasts
    sizes = _sizes(burst({"a": 3, "b": 4}))
    assert len(sizes["a"]) == 1 and sizes["a"][0] > 8
    assert max(sizes["b"]) <= 8 and sum(sizes["b"]) > 8
