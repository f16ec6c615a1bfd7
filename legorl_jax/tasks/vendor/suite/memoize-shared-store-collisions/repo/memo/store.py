"""MemoryStore: a bounded LRU mapping of (namespace, key) -> value, shareable between functions.

The namespace keeps the entries of different memoised functions apart inside one store; the size
bound (and hence eviction) is global to the store.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

MISSING = object()


class MemoryStore:
    def __init__(self, maxsize: int | None = None) -> None:
        if maxsize is not None and (isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1):
            raise ValueError(f"maxsize must be a positive int or None, got {maxsize!r}")
        self.maxsize = maxsize
        self._data: OrderedDict[tuple[Hashable, Hashable], Any] = OrderedDict()

    def __len__(self) -> int:
        return len(self._data)

    def get(self, namespace: Hashable, key: Hashable) -> Any:
        """The stored value or MISSING; a hit makes the entry most recently used."""
        slot = (namespace, key)
        if slot not in self._data:
            return MISSING
        self._data.move_to_end(slot)
        return self._data[slot]

    def set(self, namespace: Hashable, key: Hashable, value: Any) -> None:
        slot = (namespace, key)
        self._data[slot] = value
        self._data.move_to_end(slot)
        if self.maxsize is not None:
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def delete(self, namespace: Hashable, key: Hashable) -> bool:
        return self._data.pop((namespace, key), MISSING) is not MISSING

    def count(self, namespace: Hashable) -> int:
        return sum(1 for ns, _ in self._data if ns == namespace)

    def clear(self, namespace: Hashable | None = None) -> None:
        """Removes every entry, or only those of one namespace."""
        if namespace is None:
            self._data.clear()
            return
        for slot in [slot for slot in self._data if slot[0] == namespace]:
            del self._data[slot]
