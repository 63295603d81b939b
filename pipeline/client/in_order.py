"""The client-side feed's in-order collector (a file job on ``jobs.path: client``, a DataFrame
on the client-side feed): rows go to ``Pipeline.stream`` a group at a time (a chunk of an input
file, a DataFrame partition), their results come back in any order and are put back in input
order here. A result waits only until every earlier row's result is in (about the pipeline's
read-ahead window); then it is handed on, a run of rows at a time.

    order = InOrder(emit=..., whole=...)
    group = order.open(chunk, n)          # n rows, in input order
    order.set(group, k, result)           # row k answered without the pipeline (it failed a check)
    order.send(group, k)                  # row k is the next row given to Pipeline.stream
    order.place(result)                   # a result from Pipeline.stream (its index: the row's turn)
    missing = order.close()               # everything handed on; the rows that got no result
"""
from __future__ import annotations

from collections import deque
from typing import Callable

from pipeline.results import RowResult

DRAIN_EVERY = 256   # results placed between two hand-overs (runs of rows, not row by row)


class Group:
    __slots__ = ("item", "results", "emitted")

    def __init__(self, item, n: int):
        self.item = item
        self.results: list[RowResult | None] = [None] * n
        self.emitted = 0   # results already handed on


class InOrder:
    """``emit(item, results, lo, hi)``: ``results[lo:hi]`` of a group (``item``, as opened) are
    the next in input order. ``whole(item, results)``: every result of a group is in, and every
    earlier group's (each group once, in order; a group of no rows too). ``on_result(item, k,
    result)``: row ``k`` of a group got its result (at once, in any order)."""

    def __init__(self, emit: Callable | None = None, whole: Callable | None = None,
                 on_result: Callable | None = None):
        self.emit, self.whole, self.on_result = emit, whole, on_result
        self.groups: deque[Group] = deque()
        self.where: dict[int, tuple[Group, int]] = {}   # a row's turn in the stream -> its group, place
        self.sent = 0
        self.placed = 0

    def open(self, item, n: int) -> Group:
        group = Group(item, n)
        self.groups.append(group)
        return group

    def send(self, group: Group, k: int) -> None:
        self.where[self.sent] = (group, k)
        self.sent += 1

    def set(self, group: Group, k: int, result: RowResult) -> None:
        group.results[k] = result
        if self.on_result is not None:
            self.on_result(group.item, k, result)

    def place(self, result: RowResult) -> None:
        group, k = self.where.pop(result.index)
        self.set(group, k, result)
        self.placed += 1
        if self.placed % DRAIN_EVERY == 0:
            self.drain()

    def drain(self) -> None:
        """Hand on every result whose earlier rows all have theirs."""
        while self.groups:
            group = self.groups[0]
            results = group.results
            lo = hi = group.emitted
            while hi < len(results) and results[hi] is not None:
                hi += 1
            if hi > lo and self.emit is not None:
                self.emit(group.item, results, lo, hi)
            group.emitted = hi
            if hi < len(results):
                return
            self.groups.popleft()
            if self.whole is not None:
                self.whole(group.item, results)

    def close(self) -> int:
        """Hand on what is in; the number of rows that got no result."""
        self.drain()
        return len(self.where)   # (with none, every group was whole, and handed on)
