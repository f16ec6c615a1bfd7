"""Kruskal's minimum spanning forest over an edge list."""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from linkage.dsu import DisjointSet

Edge = tuple[Hashable, Hashable, float]


def minimum_spanning_forest(edges: Iterable[Edge], nodes: Iterable[Hashable] = ()) -> tuple[list[Edge], float]:
    """(chosen edges, total weight). Ties between equal weights keep input order (stable sort)."""
    forest = DisjointSet(nodes)
    chosen: list[Edge] = []
    total = 0.0
    for u, v, w in sorted(edges, key=lambda e: e[2]):
        if isinstance(w, bool) or not isinstance(w, (int, float)):
            raise TypeError(f"edge weight must be a number, got {w!r}")
        if forest.union(u, v):
            chosen.append((u, v, w))
            total += w
    return chosen, total
