"""RingBuffer: a fixed-capacity sequence that overwrites its oldest item when full.

Storage is a list of `capacity` slots; `_start` is the slot of the oldest item and `_size` how many
slots are in use. Logical index i (0 = oldest) lives in slot (_start + i) % capacity.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


class RingBuffer:
    def __init__(self, capacity: int, items: Iterable[Any] = ()) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        self._capacity = capacity
        self._slots: list[Any] = [None] * capacity
        self._start = 0
        self._size = 0
        self.dropped = 0
        self.extend(items)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def full(self) -> bool:
        return self._size == self._capacity

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __repr__(self) -> str:
        return f"RingBuffer({self._capacity}, {self.to_list()!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RingBuffer):
            return self._capacity == other._capacity and self.to_list() == other.to_list()
        return NotImplemented

    def append(self, item: Any) -> None:
        end = (self._start + self._size) % self._capacity
        self._slots[end] = item
        if self.full:
            self._start = (self._start + 1) % self._capacity
            self.dropped += 1
        else:
            self._size += 1

    def extend(self, items: Iterable[Any]) -> None:
        for item in items:
            self.append(item)

    def popleft(self) -> Any:
        if not self._size:
            raise IndexError("popleft from an empty ring buffer")
        item = self._slots[self._start]
        self._slots[self._start] = None
        self._start = (self._start + 1) % self._capacity
        self._size -= 1
        return item

    def pop(self) -> Any:
        if not self._size:
            raise IndexError("pop from an empty ring buffer")
        slot = (self._start + self._size - 1) % self._capacity
        item = self._slots[slot]
        self._slots[slot] = None
        self._size -= 1
        return item

    def clear(self) -> None:
        self._slots = [None] * self._capacity
        self._start = 0
        self._size = 0

    @property
    def oldest(self) -> Any:
        if not self._size:
            raise IndexError("empty ring buffer has no oldest item")
        return self._slots[self._start]

    @property
    def newest(self) -> Any:
        if not self._size:
            raise IndexError("empty ring buffer has no newest item")
        return self._slots[(self._start + self._size - 1) % self._capacity]

    def _slot(self, index: int) -> int:
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"ring buffer indices must be int or slice, got {type(index).__name__}")
        if index < 0:
            index += self._capacity
        if not 0 <= index < self._size:
            raise IndexError(f"ring buffer index out of range (size {self._size})")
        return (self._start + index) % self._capacity

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._slots[(self._start + i) % self._capacity]
                    for i in range(*index.indices(self._size))]
        return self._slots[self._slot(index)]

    def __setitem__(self, index: int, item: Any) -> None:
        self._slots[self._slot(index)] = item

    def __iter__(self) -> Iterator[Any]:
        for i in range(self._size):
            yield self._slots[(self._start + i) % self._capacity]

    def to_list(self) -> list[Any]:
        return list(self)
