"""IndexedHeap: a binary min-heap of (key, item) with a position index per item.

Invariant: for every index i > 0, entries[(i - 1) // 2].key <= entries[i].key, and
position[entries[i].item] == i. Keys only need `<`; the queue layer makes them unique with a
sequence number so that items themselves are never compared.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

from prioq.errors import DuplicateItemError, EmptyQueueError


class _Entry:
    __slots__ = ("key", "item")

    def __init__(self, key: Any, item: Hashable) -> None:
        self.key = key
        self.item = item


class IndexedHeap:
    def __init__(self) -> None:
        self._entries: list[_Entry] = []
        self._position: dict[Hashable, int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, item: object) -> bool:
        return item in self._position

    def __iter__(self) -> Iterator[tuple[Hashable, Any]]:
        """(item, key) pairs in heap (not sorted) order."""
        return ((e.item, e.key) for e in self._entries)

    def key_of(self, item: Hashable) -> Any:
        return self._entries[self._position[item]].key

    def push(self, item: Hashable, key: Any) -> None:
        if item in self._position:
            raise DuplicateItemError(f"item {item!r} is already in the heap")
        self._entries.append(_Entry(key, item))
        self._position[item] = len(self._entries) - 1
        self._sift_up(len(self._entries) - 1)

    def peek(self) -> tuple[Hashable, Any]:
        if not self._entries:
            raise EmptyQueueError("peek from an empty heap")
        top = self._entries[0]
        return top.item, top.key

    def pop(self) -> tuple[Hashable, Any]:
        if not self._entries:
            raise EmptyQueueError("pop from an empty heap")
        top = self._entries[0]
        last = self._entries.pop()
        del self._position[top.item]
        if self._entries:
            self._entries[0] = last
            self._position[last.item] = 0
            self._sift_down(0)
        return top.item, top.key

    def change_key(self, item: Hashable, key: Any) -> None:
        index = self._position[item]
        entry = self._entries[index]
        old, entry.key = entry.key, key
        if key < old:
            self._sift_up(index)
        else:
            self._sift_down(index)

    def remove(self, item: Hashable) -> Any:
        """Removes `item` and returns its key."""
        index = self._position.pop(item)
        removed = self._entries[index]
        last = self._entries.pop()
        if index < len(self._entries):
            self._entries[index] = last
            self._position[last.item] = index
            self._sift_down(index)
        return removed.key

    def check(self) -> None:
        """Raises AssertionError if the heap invariant or the index is broken (for debugging)."""
        for i, entry in enumerate(self._entries):
            if self._position[entry.item] != i:
                raise AssertionError(f"position of {entry.item!r} is stale")
            if i and entry.key < self._entries[(i - 1) // 2].key:
                raise AssertionError(f"heap order broken at index {i}")

    def _sift_up(self, index: int) -> None:
        entries, position = self._entries, self._position
        entry = entries[index]
        while index > 0:
            parent = (index - 1) // 2
            if not entry.key < entries[parent].key:
                break
            entries[index] = entries[parent]
            position[entries[index].item] = index
            index = parent
        entries[index] = entry
        position[entry.item] = index

    def _sift_down(self, index: int) -> None:
        entries, position = self._entries, self._position
        size = len(entries)
        entry = entries[index]
        while True:
            child = 2 * index + 1
            if child >= size:
                break
            if child + 1 < size and entries[child + 1].key < entries[child].key:
                child += 1
            if not entries[child].key < entry.key:
                break
            entries[index] = entries[child]
            position[entries[index].item] = index
            index = child
        entries[index] = entry
        position[entry.item] = index
