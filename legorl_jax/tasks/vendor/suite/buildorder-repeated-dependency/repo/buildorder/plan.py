"""Build plans: what to build, in which order, to produce some goals.

Rules are written one per line as `target: dep dep ...` (Makefile style, without recipes); `#`
starts a comment. A target may appear on several lines; its dependencies accumulate.
"""

from __future__ import annotations

from collections.abc import Iterable

from buildorder.graph import DependencyGraph
from buildorder.order import topological_order


def parse_rules(text: str) -> DependencyGraph:
    graph = DependencyGraph()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        target, sep, deps = line.partition(":")
        if not sep or not target.strip():
            raise ValueError(f"line {number}: expected 'target: deps', got {raw.strip()!r}")
        graph.add(target.strip(), deps.split())
    return graph


def plan(graph: DependencyGraph, goals: Iterable[str], done: Iterable[str] = ()) -> list[str]:
    """Targets to build for `goals`, dependencies first, leaving out those already `done`."""
    goals = list(goals)
    if not goals:
        raise ValueError("plan needs at least one goal")
    needed = graph.closure(goals)
    finished = set(done)
    return [name for name in topological_order(graph, among=needed) if name not in finished]
