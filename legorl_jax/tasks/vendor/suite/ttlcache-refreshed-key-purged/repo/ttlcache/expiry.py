"""ExpiryQueue: deadlines of cache keys, earliest first (a binary heap).

It only answers "which keys had a deadline at or before now?"; it does not know whether the cache
still holds those keys. A sequence number keeps heap entries comparable when keys are not (e.g. a
mix of str and int keys) and makes equal deadlines pop in scheduling order.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable


class ExpiryQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, key: Hashable, deadline: float) -> None:
        heapq.heappush(self._heap, (deadline, next(self._seq), key))

    def next_deadline(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list[Hashable]:
        """Keys whose deadline is <= now, earliest first; they are removed from the queue."""
        due = []
        while self._heap and self._heap[0][0] <= now:
            due.append(heapq.heappop(self._heap)[2])
        return due

    def clear(self) -> None:
        self._heap.clear()
