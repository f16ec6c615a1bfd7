"""Cycle detection: the error raised when no order exists, naming one offending cycle."""

from __future__ import annotations

from buildorder.graph import DependencyGraph


class CycleError(ValueError):
    def __init__(self, cycle: list[str]) -> None:
        super().__init__("dependency cycle: " + " -> ".join(cycle))
        self.cycle = cycle


def find_cycle(graph: DependencyGraph, among: set[str] | None = None) -> list[str] | None:
    """One cycle as [a, b, ..., a] (a requires b ...), or None. `among` limits the search."""
    names = [n for n in graph.targets() if among is None or n in among]
    state: dict[str, int] = {}  # 1 = on the current path, 2 = finished
    for start in names:
        if start in state:
            continue
        path: list[str] = []
        stack = [(start, iter(graph.requires(start)))]
        state[start] = 1
        path.append(start)
        while stack:
            node, deps = stack[-1]
            dep = next(deps, None)
            if dep is None:
                stack.pop()
                path.pop()
                state[node] = 2
                continue
            if among is not None and dep not in among:
                continue
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                state[dep] = 1
                path.append(dep)
                stack.append((dep, iter(graph.requires(dep))))
    return None
