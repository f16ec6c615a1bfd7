"""Dijkstra's algorithm with a binary heap and lazy deletion.

A node may be pushed several times as shorter routes to it are found; stale heap entries (whose
distance is larger than the best known) are skipped when popped. Once a node is popped with its best
distance, that distance is final: with non-negative weights no later route can be shorter.
Heap entries carry an insertion counter so nodes themselves are never compared.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable

from routes.errors import NoPath
from routes.graph import WeightedGraph
from routes.path import Path, reconstruct


def _check_source(graph: WeightedGraph, node: Hashable, name: str) -> None:
    if node not in graph:
        raise KeyError(f"{name} {node!r} is not in the graph")


def _search(graph: WeightedGraph, source: Hashable, target: Hashable | None = None) -> tuple[dict, dict]:
    """(distance, predecessor) maps; with a target, stops as soon as the target's distance is final."""
    dist = {source: 0}
    prev: dict[Hashable, Hashable] = {}
    counter = itertools.count()
    heap = [(0, next(counter), source)]
    while heap:
        d, _, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        for v, w in graph.neighbors(u):
            nd = d + w
            if v not in dist or nd < dist[v]:
                dist[v] = nd
                prev[v] = u
                if v == target:
                    return dist, prev
                heapq.heappush(heap, (nd, next(counter), v))
    return dist, prev


def shortest_paths(graph: WeightedGraph, source: Hashable) -> tuple[dict, dict]:
    """(distance, predecessor) maps for every node reachable from `source`."""
    _check_source(graph, source, "source")
    return _search(graph, source)


def shortest_path(graph: WeightedGraph, source: Hashable, target: Hashable) -> Path:
    """The cheapest route from source to target; raises NoPath when there is none."""
    _check_source(graph, source, "source")
    _check_source(graph, target, "target")
    if source == target:
        return Path([source], 0)
    dist, prev = _search(graph, source, target)
    if target not in dist:
        raise NoPath(source, target)
    return Path(reconstruct(prev, source, target), dist[target])


def reachable_within(graph: WeightedGraph, source: Hashable, budget: float) -> dict:
    """Nodes whose distance from source is at most `budget`, with their distances."""
    if budget < 0:
        raise ValueError(f"budget must be non-negative, got {budget!r}")
    dist, _ = shortest_paths(graph, source)
    return {node: d for node, d in dist.items() if d <= budget}
