"""LRUStore: an OrderedDict kept in recency order (least recently used first)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Any


class LRUStore:
    def __init__(self) -> None:
        self._data: OrderedDict[Hashable, Any] = OrderedDict()

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._data)

    def get(self, key: Hashable) -> Any:
        """The value, marking the key as most recently used; None if absent."""
        if key not in self._data:
            return None
        self._data.move_to_end(key)
        return self._data[key]

    def peek(self, key: Hashable) -> Any:
        """The value without touching recency; None if absent."""
        return self._data.get(key)

    def put(self, key: Hashable, value: Any) -> None:
        self._data[key] = value
        self._data.move_to_end(key)

    def pop(self, key: Hashable) -> Any:
        return self._data.pop(key, None)

    def pop_oldest(self) -> tuple[Hashable, Any]:
        return self._data.popitem(last=False)

    def clear(self) -> None:
        self._data.clear()
