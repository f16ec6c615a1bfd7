"""A small text format for networks, one edge per line:

    A - B : 4        two-way edge of weight 4
    A -> C : 1.5     one-way edge
    # comments and blank lines are ignored

A graph containing any one-way edge is directed (two-way edges are stored in both directions).
"""

from __future__ import annotations

import re

from routes.graph import WeightedGraph

_EDGE = re.compile(r"^\s*(?P<u>[^\s-]+)\s*(?P<arrow>->|-)\s*(?P<v>[^\s:]+)\s*:\s*(?P<w>[0-9.]+)\s*$")


def parse_network(text: str) -> WeightedGraph:
    edges = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _EDGE.match(line)
        if match is None:
            raise ValueError(f"line {number}: cannot parse edge {raw.strip()!r}")
        try:
            weight = float(match["w"])
        except ValueError:
            raise ValueError(f"line {number}: bad weight {match['w']!r}") from None
        if weight.is_integer():
            weight = int(weight)
        edges.append((match["u"], match["v"], weight, match["arrow"] == "->"))
    directed = any(one_way for *_, one_way in edges)
    graph = WeightedGraph(directed=directed)
    for u, v, weight, one_way in edges:
        graph.add_edge(u, v, weight)
        if directed and not one_way:
            graph.add_edge(v, u, weight)
    return graph
