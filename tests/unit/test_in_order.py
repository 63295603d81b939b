"""The client-side feed's in-order collector, without a cluster: results that come back in any
order are handed on in input order, each row once; a group (a chunk, a partition) is whole
once, in order, even with no rows; a row that never comes back is counted, not dropped."""
import random

from pipeline.client.in_order import InOrder
from pipeline.results import RowResult


def test_results_in_any_order_are_handed_on_in_input_order_each_once():
    emitted, wholes, seen = [], [], []
    order = InOrder(emit=lambda item, results, lo, hi: emitted.extend((item, k, results[k].answer)
                                                                       for k in range(lo, hi)),
                    whole=lambda item, results: wholes.append((item, [r.answer for r in results])),
                    on_result=lambda item, k, r: seen.append((item, k)))
    sizes = {"a": 700, "empty": 0, "b": 3, "c": 500}
    sent = []
    for item, n in sizes.items():
        group = order.open(item, n)
        for k in range(n):
            if item == "b" and k == 1:   # failed a check while read: answered at once
                order.set(group, k, RowResult(-1, answer="b1"))
            else:
                order.send(group, k)
                sent.append(f"{item}{k}")
    turns = list(range(len(sent)))
    random.Random(3).shuffle(turns)
    for turn in turns:
        order.place(RowResult(turn, answer=sent[turn]))
    assert order.close() == 0
    expected = [(item, k, f"{item}{k}") for item, n in sizes.items() for k in range(n)]
    assert emitted == expected
    assert [w[0] for w in wholes] == list(sizes) and wholes[1] == ("empty", [])
    assert sorted(seen) == sorted((item, k) for item, n in sizes.items() for k in range(n))


def test_a_row_without_a_result_holds_back_the_rows_after_it_and_is_counted():
    emitted = []
    order = InOrder(emit=lambda item, results, lo, hi: emitted.extend(range(lo, hi)))
    group = order.open("a", 4)
    for k in range(4):
        order.send(group, k)
    for turn in (0, 2, 3):
        order.place(RowResult(turn))
    assert order.close() == 1
    assert emitted == [0]   # rows 2 and 3 wait behind row 1
