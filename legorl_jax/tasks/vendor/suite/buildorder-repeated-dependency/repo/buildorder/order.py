"""Topological order and parallel build stages (Kahn's algorithm).

A target becomes ready when its count of unbuilt requirements reaches zero; ready targets are taken
in declaration order (a heap keyed by rank). If targets remain when nothing is ready, they contain a
cycle, reported through `find_cycle`.
"""

from __future__ import annotations

import heapq

from buildorder.cycles import CycleError, find_cycle
from buildorder.graph import DependencyGraph


def _pending_counts(graph: DependencyGraph, among: set[str] | None) -> dict[str, int]:
    names = graph.targets() if among is None else [n for n in graph.targets() if n in among]
    return {n: sum(1 for d in graph.requires(n) if among is None or d in among) for n in names}


def topological_order(graph: DependencyGraph, among: set[str] | None = None) -> list[str]:
    rank = graph.rank()
    pending = _pending_counts(graph, among)
    ready = [(rank[n], n) for n, count in pending.items() if count == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(name)
        for user in graph.required_by(name):
            if user not in pending:
                continue
            pending[user] -= 1
            if pending[user] == 0:
                heapq.heappush(ready, (rank[user], user))
    if len(order) < len(pending):
        raise CycleError(find_cycle(graph, set(pending) - set(order)))
    return order


def build_stages(graph: DependencyGraph, among: set[str] | None = None) -> list[list[str]]:
    """Targets grouped so that each stage only requires targets of earlier stages."""
    rank = graph.rank()
    pending = _pending_counts(graph, among)
    stage = sorted((n for n, count in pending.items() if count == 0), key=rank.__getitem__)
    stages: list[list[str]] = []
    done = 0
    while stage:
        stages.append(stage)
        done += len(stage)
        following = []
        for name in stage:
            for user in graph.required_by(name):
                if user not in pending:
                    continue
                pending[user] -= 1
                if pending[user] == 0:
                    following.append(user)
        stage = sorted(following, key=rank.__getitem__)
    if done < len(pending):
        built = {n for s in stages for n in s}
        raise CycleError(find_cycle(graph, set(pending) - built))
    return stages
