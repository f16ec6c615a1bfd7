"""DisjointSet: union by size, path compression; elements are added on first use."""

from __future__ import annotations

from collections.abc import Hashable, Iterable


class DisjointSet:
    def __init__(self, elements: Iterable[Hashable] = ()) -> None:
        self._parent: dict[Hashable, Hashable] = {}
        self._size: dict[Hashable, int] = {}
        self.count = 0
        for element in elements:
            self.add(element)

    def add(self, x: Hashable) -> None:
        if x not in self._parent:
            self._parent[x] = x
            self._size[x] = 1
            self.count += 1

    def __contains__(self, x: object) -> bool:
        return x in self._parent

    def __len__(self) -> int:
        return len(self._parent)

    def find(self, x: Hashable) -> Hashable:
        self.add(x)
        root = x
        while self._parent[root] != root:
            root = self._parent[root]
        while self._parent[x] != root:
            self._parent[x], x = root, self._parent[x]
        return root

    def union(self, a: Hashable, b: Hashable) -> bool:
        """Merges the sets of a and b; False if they were already one set."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        if self._size[ra] < self._size[rb]:
            ra, rb = rb, ra
        self._parent[rb] = ra
        self._size[ra] += self._size[rb]
        self.count -= 1
        return True

    def connected(self, a: Hashable, b: Hashable) -> bool:
        return self.find(a) == self.find(b)

    def size_of(self, x: Hashable) -> int:
        return self._size[self.find(x)]

    def groups(self) -> list[list[Hashable]]:
        """The sets, each in insertion order, ordered by their first element."""
        by_root: dict[Hashable, list[Hashable]] = {}
        for x in self._parent:
            by_root.setdefault(self.find(x), []).append(x)
        return list(by_root.values())
