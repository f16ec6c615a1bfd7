"""DependencyGraph: targets and the targets they require.

Two indexes are kept in step: `_requires[t]` (what t needs, an insertion-ordered set as a dict) and
`_required_by[d]` (who needs d, in declaration order). Targets are numbered in order of first
appearance; algorithms use that number to break ties deterministically.
"""

from __future__ import annotations

from collections.abc import Iterable


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip() or any(c.isspace() for c in name):
        raise ValueError(f"target names must be non-empty strings without spaces, got {name!r}")
    return name


class DependencyGraph:
    def __init__(self) -> None:
        self._requires: dict[str, dict[str, None]] = {}
        self._required_by: dict[str, list[str]] = {}

    def _ensure(self, name: str) -> None:
        if name not in self._requires:
            self._requires[_check_name(name)] = {}
            self._required_by[name] = []

    def add(self, target: str, deps: Iterable[str] = ()) -> None:
        """Declares that `target` requires each of `deps` (adding to earlier declarations)."""
        if isinstance(deps, str):
            raise TypeError(f"deps must be a list of names, not the string {deps!r}")
        self._ensure(target)
        for dep in deps:
            self._ensure(dep)
            if dep == target:
                raise ValueError(f"target {target!r} cannot depend on itself")
            self._requires[target][dep] = None
            self._required_by[dep].append(target)

    def __contains__(self, name: object) -> bool:
        return name in self._requires

    def __len__(self) -> int:
        return len(self._requires)

    def targets(self) -> list[str]:
        """All targets in order of first appearance."""
        return list(self._requires)

    def requires(self, target: str) -> list[str]:
        return list(self._requires[target])

    def required_by(self, target: str) -> list[str]:
        return list(self._required_by[target])

    def rank(self) -> dict[str, int]:
        """Position of each target in declaration order (for tie-breaking)."""
        return {name: i for i, name in enumerate(self._requires)}

    def closure(self, goals: Iterable[str]) -> set[str]:
        """The goals and everything they transitively require."""
        seen: set[str] = set()
        stack = list(goals)
        while stack:
            name = stack.pop()
            if name not in self._requires:
                raise KeyError(f"unknown target {name!r}")
            if name in seen:
                continue
            seen.add(name)
            stack.extend(self._requires[name])
        return seen
