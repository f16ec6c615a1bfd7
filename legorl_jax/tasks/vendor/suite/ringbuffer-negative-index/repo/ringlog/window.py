"""SlidingWindow: statistics over the last `size` numbers of a stream.

The sum is maintained incrementally; min and max are recomputed from the buffer (windows are
small, and an incremental max needs a deque of candidates that is not worth it here).
"""

from __future__ import annotations

import math

from ringlog.buffer import RingBuffer


class SlidingWindow:
    def __init__(self, size: int) -> None:
        self._buffer = RingBuffer(size)
        self._sum = 0.0

    def __len__(self) -> int:
        return len(self._buffer)

    @property
    def size(self) -> int:
        return self._buffer.capacity

    def add(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise ValueError(f"window values must be numbers, got {value!r}")
        if self._buffer.full:
            self._sum -= self._buffer.oldest
        self._buffer.append(value)
        self._sum += value

    def values(self) -> list[float]:
        return self._buffer.to_list()

    @property
    def total(self) -> float:
        return self._sum

    def mean(self) -> float:
        if not self._buffer:
            raise ValueError("mean of an empty window")
        return self._sum / len(self._buffer)

    def min(self) -> float:
        return min(self._buffer)

    def max(self) -> float:
        return max(self._buffer)

    @property
    def latest(self) -> float:
        return self._buffer.newest

    def change(self) -> float:
        """Newest value minus the oldest value still in the window."""
        return self._buffer.newest - self._buffer.oldest
