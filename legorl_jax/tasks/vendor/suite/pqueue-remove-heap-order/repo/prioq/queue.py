"""PriorityQueue: the public queue API over IndexedHeap.

Heap keys are (priority, sequence). The sequence number is taken at push and at every update, so
equal priorities leave in FIFO order of when they got that priority; max-order queues negate the
priority, which is why priorities must be numbers.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterable

from prioq.heap import IndexedHeap

_ORDERS = ("min", "max")


class PriorityQueue:
    def __init__(self, items: Iterable[tuple[Hashable, float]] = (), order: str = "min") -> None:
        if order not in _ORDERS:
            raise ValueError(f"order must be one of {_ORDERS}, got {order!r}")
        self._sign = 1 if order == "min" else -1
        self._heap = IndexedHeap()
        self._counter = itertools.count()
        for item, priority in items:
            self.push(item, priority)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return len(self._heap) > 0

    def __contains__(self, item: object) -> bool:
        return item in self._heap

    def _key(self, priority: float) -> tuple[float, int]:
        if isinstance(priority, bool) or not isinstance(priority, (int, float)):
            raise TypeError(f"priority must be a number, got {priority!r}")
        if priority != priority:
            raise ValueError("priority must not be NaN")
        return (self._sign * priority, next(self._counter))

    def push(self, item: Hashable, priority: float) -> None:
        self._heap.push(item, self._key(priority))

    def pop(self) -> tuple[Hashable, float]:
        item, key = self._heap.pop()
        return item, self._sign * key[0]

    def peek(self) -> tuple[Hashable, float]:
        item, key = self._heap.peek()
        return item, self._sign * key[0]

    def priority(self, item: Hashable) -> float:
        return self._sign * self._heap.key_of(item)[0]

    def update(self, item: Hashable, priority: float) -> None:
        if item not in self._heap:
            raise KeyError(item)
        self._heap.change_key(item, self._key(priority))

    def push_or_update(self, item: Hashable, priority: float) -> None:
        if item in self._heap:
            self.update(item, priority)
        else:
            self.push(item, priority)

    def remove(self, item: Hashable) -> float:
        if item not in self._heap:
            raise KeyError(item)
        return self._sign * self._heap.remove(item)[0]

    def peek_n(self, n: int) -> list[tuple[Hashable, float]]:
        """The first n (item, priority) pairs in pop order, without removing them."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be a non-negative int, got {n!r}")
        first = heapq.nsmallest(n, self._heap, key=lambda pair: pair[1])
        return [(item, self._sign * key[0]) for item, key in first]

    def drain(self) -> list[tuple[Hashable, float]]:
        """Pops everything, in priority order."""
        out = []
        while self._heap:
            out.append(self.pop())
        return out
