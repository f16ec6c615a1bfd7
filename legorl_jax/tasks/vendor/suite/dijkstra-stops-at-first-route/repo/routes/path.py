"""Path values and reconstruction from predecessor maps."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Path:
    nodes: list[Hashable] = field(default_factory=list)
    cost: float = 0

    def __len__(self) -> int:
        """Number of edges."""
        return max(len(self.nodes) - 1, 0)

    def edges(self) -> list[tuple[Hashable, Hashable]]:
        return list(zip(self.nodes, self.nodes[1:]))


def reconstruct(prev: Mapping[Hashable, Hashable], source: Hashable, target: Hashable) -> list[Hashable]:
    """Walks predecessor links back from target to source."""
    nodes = [target]
    while nodes[-1] != source:
        nodes.append(prev[nodes[-1]])
        if len(nodes) > len(prev) + 1:
            raise RuntimeError("predecessor map contains a cycle")
    nodes.reverse()
    return nodes
