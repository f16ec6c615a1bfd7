"""WeightedGraph: adjacency lists with non-negative edge weights.

Parallel edges are allowed (two bus lines between the same stops); algorithms simply see both.
Nodes can be any hashable values; insertion order of nodes and edges is kept, which makes ties in
the algorithms deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Iterator


class WeightedGraph:
    def __init__(self, directed: bool = False) -> None:
        self.directed = directed
        self._adj: dict[Hashable, list[tuple[Hashable, float]]] = {}

    @classmethod
    def from_edges(cls, edges: Iterable[tuple[Hashable, Hashable, float]], directed: bool = False):
        graph = cls(directed)
        for u, v, w in edges:
            graph.add_edge(u, v, w)
        return graph

    def add_node(self, node: Hashable) -> None:
        self._adj.setdefault(node, [])

    def add_edge(self, u: Hashable, v: Hashable, weight: float) -> None:
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise TypeError(f"edge weight must be a number, got {weight!r}")
        if not weight >= 0 or math.isinf(weight):
            raise ValueError(f"edge weight must be finite and non-negative, got {weight!r} on {u!r}-{v!r}")
        self.add_node(u)
        self.add_node(v)
        self._adj[u].append((v, weight))
        if not self.directed:
            self._adj[v].append((u, weight))

    def __contains__(self, node: object) -> bool:
        return node in self._adj

    def __len__(self) -> int:
        return len(self._adj)

    def nodes(self) -> list[Hashable]:
        return list(self._adj)

    def neighbors(self, node: Hashable) -> Iterator[tuple[Hashable, float]]:
        if node not in self._adj:
            raise KeyError(f"unknown node {node!r}")
        return iter(self._adj[node])

    def edge_count(self) -> int:
        total = sum(len(edges) for edges in self._adj.values())
        return total if self.directed else total // 2

    def weight(self, u: Hashable, v: Hashable) -> float:
        """The lightest edge from u to v."""
        weights = [w for n, w in self._adj.get(u, []) if n == v]
        if not weights:
            raise KeyError(f"no edge {u!r} -> {v!r}")
        return min(weights)
