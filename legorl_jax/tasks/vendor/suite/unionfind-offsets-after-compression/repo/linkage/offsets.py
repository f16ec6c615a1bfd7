"""RelativeOffsets: union-find where each element also knows its offset from its set's root.

`_offset[x]` is pos(x) - pos(_parent[x]). `_find(x)` returns the root and compresses the path, after
which every node on it points at the root directly and `_offset[node]` is pos(node) - pos(root).
Union by size keeps trees shallow; the root's offset is 0 by definition.
"""

from __future__ import annotations

from collections.abc import Hashable


class InconsistentOffset(ValueError):
    pass


class RelativeOffsets:
    def __init__(self, tolerance: float = 1e-9) -> None:
        if tolerance < 0:
            raise ValueError(f"tolerance must be non-negative, got {tolerance!r}")
        self.tolerance = tolerance
        self._parent: dict[Hashable, Hashable] = {}
        self._offset: dict[Hashable, float] = {}
        self._size: dict[Hashable, int] = {}

    def __contains__(self, x: object) -> bool:
        return x in self._parent

    def _add(self, x: Hashable) -> None:
        if x not in self._parent:
            self._parent[x] = x
            self._offset[x] = 0.0
            self._size[x] = 1

    def _find(self, x: Hashable) -> Hashable:
        path = []
        root = x
        while self._parent[root] != root:
            path.append(root)
            root = self._parent[root]
        for node in path:
            parent = self._parent[node]
            self._offset[node] += self._offset[parent]
            self._parent[node] = root
        return root

    def relate(self, a: Hashable, b: Hashable, delta: float) -> None:
        """Records pos(a) - pos(b) == delta."""
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or delta != delta:
            raise ValueError(f"delta must be a number, got {delta!r}")
        self._add(a)
        self._add(b)
        ra, rb = self._find(a), self._find(b)
        oa, ob = self._offset[a], self._offset[b]
        if ra == rb:
            known = oa - ob
            if abs(known - delta) > self.tolerance:
                raise InconsistentOffset(
                    f"{a!r} - {b!r} is already known to be {known!r}, cannot also be {delta!r}")
            return
        # pos(ra) - pos(rb) = (pos(a) - oa) - (pos(b) - ob) = delta - oa + ob
        between = delta - oa + ob
        if self._size[ra] < self._size[rb]:
            ra, rb, between = rb, ra, -between
        self._parent[rb] = ra
        self._offset[rb] = -between
        self._size[ra] += self._size[rb]

    def difference(self, a: Hashable, b: Hashable) -> float | None:
        """pos(a) - pos(b), or None when a and b are not (transitively) related."""
        if a not in self._parent or b not in self._parent:
            return None
        if self._find(a) != self._find(b):
            return None
        return self._offset[a] - self._offset[b]

    def positions(self, anchor: Hashable) -> dict[Hashable, float]:
        """Every element related to `anchor`, with its position taking pos(anchor) = 0."""
        if anchor not in self._parent:
            raise KeyError(f"unknown element {anchor!r}")
        root = self._find(anchor)
        base = self._offset[anchor]
        return {x: self._offset[x] - base for x in list(self._parent) if self._find(x) == root}
