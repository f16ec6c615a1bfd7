"""IntervalTree: a self-balancing tree of intervals ordered by (start, end).

Queries:
- `at(point)`: intervals containing the point;
- `overlapping(start, end)`: intervals sharing at least one point with [start, end);
- `enveloped_by(start, end)`: intervals lying completely inside [start, end).
Duplicate intervals (same start, end and data) may be stored; `remove` deletes one of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from spans.interval import Interval
from spans.node import Node, rebalance


def _key(interval: Interval):
    return (interval.start, interval.end)


class IntervalTree:
    def __init__(self, intervals: Iterable[Interval] = ()) -> None:
        self._root: Node | None = None
        self._size = 0
        for interval in intervals:
            self.add(interval)

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iter__(self) -> Iterator[Interval]:
        stack: list[Node] = []
        node = self._root
        while stack or node is not None:
            while node is not None:
                stack.append(node)
                node = node.left
            node = stack.pop()
            yield node.interval
            node = node.right

    def __contains__(self, interval: object) -> bool:
        if not isinstance(interval, Interval):
            return False
        return any(found == interval and found.data == interval.data
                   for found in self.overlapping(interval.start, interval.end))

    def add(self, interval: Interval) -> None:
        if not isinstance(interval, Interval):
            raise TypeError(f"IntervalTree stores Interval objects, got {type(interval).__name__}")
        self._root = self._insert(self._root, interval)
        self._size += 1

    def addi(self, start, end, data=None) -> Interval:
        interval = Interval(start, end, data)
        self.add(interval)
        return interval

    def remove(self, interval: Interval) -> None:
        removed: list[bool] = []
        self._root = self._delete(self._root, interval, removed)
        if not removed:
            raise KeyError(f"{interval!r} is not in the tree")
        self._size -= 1

    def discard(self, interval: Interval) -> bool:
        try:
            self.remove(interval)
        except KeyError:
            return False
        return True

    def at(self, point) -> list[Interval]:
        return [iv for iv in self._candidates(point, point) if iv.contains_point(point)]

    def overlapping(self, start, end) -> list[Interval]:
        query = Interval(start, end)
        return [iv for iv in self._candidates(start, end) if iv.overlaps(query)]

    def enveloped_by(self, start, end) -> list[Interval]:
        query = Interval(start, end)
        return [iv for iv in self._candidates(start, end) if query.contains(iv)]

    def extent(self) -> Interval | None:
        """The interval from the smallest start to the largest end, or None when empty."""
        if self._root is None:
            return None
        node = self._root
        while node.left is not None:
            node = node.left
        return Interval(node.interval.start, self._root.max_end)

    def height(self) -> int:
        return self._root.height if self._root is not None else 0

    # -- internals ---------------------------------------------------------------------------------

    def _candidates(self, start, end) -> list[Interval]:
        """Intervals that may meet [start, end], in tree order.

        Pruning is deliberately conservative (it keeps intervals that merely touch the query); the
        exact test is left to the caller so every query shares one traversal.
        """
        out: list[Interval] = []
        stack = [self._root] if self._root is not None else []
        while stack:
            node = stack.pop()
            if node.max_end < start:
                continue
            if node.right is not None and node.interval.start <= end:
                stack.append(node.right)
            if node.interval.start <= end and node.interval.end >= start:
                out.append(node.interval)
            if node.left is not None:
                stack.append(node.left)
        out.sort(key=_key)
        return out

    def _insert(self, node: Node | None, interval: Interval) -> Node:
        if node is None:
            return Node(interval)
        if _key(interval) < _key(node.interval):
            node.left = self._insert(node.left, interval)
        else:
            node.right = self._insert(node.right, interval)
        return rebalance(node)

    def _delete(self, node: Node | None, interval: Interval, removed: list[bool]) -> Node | None:
        if node is None:
            return None
        key = _key(interval)
        here = _key(node.interval)
        if key < here:
            node.left = self._delete(node.left, interval, removed)
        elif key > here:
            node.right = self._delete(node.right, interval, removed)
        elif node.interval.data != interval.data:
            # Equal keys may sit on either side after rotations.
            node.left = self._delete(node.left, interval, removed)
            if not removed:
                node.right = self._delete(node.right, interval, removed)
        else:
            removed.append(True)
            if node.left is None:
                return node.right
            if node.right is None:
                return node.left
            successor = node.right
            while successor.left is not None:
                successor = successor.left
            node.interval = successor.interval
            node.right = self._delete_exact(node.right, successor)
        return rebalance(node)

    def _delete_exact(self, node: Node, target: Node) -> Node | None:
        if node is target:
            return node.right
        node.left = self._delete_exact(node.left, target)
        return rebalance(node)
