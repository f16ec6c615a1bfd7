"""Polygon: a closed ring of vertices (the last connects back to the first).

Area is signed by orientation internally (shoelace) and reported positive; `is_clockwise` exposes
the sign. Point containment uses ray casting with an explicit boundary check first, so points on an
edge or vertex count as inside.
"""

from __future__ import annotations

from collections.abc import Sequence

from planar.point import Point
from planar.segment import Segment


class Polygon:
    def __init__(self, vertices: Sequence[Point]) -> None:
        vertices = list(vertices)
        if len(vertices) < 3:
            raise ValueError(f"a polygon needs at least 3 vertices, got {len(vertices)}")
        for v in vertices:
            if not isinstance(v, Point):
                raise TypeError(f"polygon vertices must be Points, got {v!r}")
        self.vertices = vertices

    def edges(self) -> list[Segment]:
        n = len(self.vertices)
        return [Segment(self.vertices[i], self.vertices[(i + 1) % n]) for i in range(n)]

    def signed_area(self) -> float:
        n = len(self.vertices)
        total = 0.0
        for i in range(n):
            total += self.vertices[i].cross(self.vertices[(i + 1) % n])
        return total / 2

    @property
    def area(self) -> float:
        return abs(self.signed_area())

    @property
    def perimeter(self) -> float:
        return sum(edge.length for edge in self.edges())

    def is_clockwise(self) -> bool:
        return self.signed_area() < 0

    def centroid(self) -> Point:
        area = self.signed_area()
        if area == 0:
            raise ValueError("centroid of a degenerate (zero-area) polygon is undefined")
        cx = cy = 0.0
        n = len(self.vertices)
        for i in range(n):
            p, q = self.vertices[i], self.vertices[(i + 1) % n]
            w = p.cross(q)
            cx += (p.x + q.x) * w
            cy += (p.y + q.y) * w
        return Point(cx / (6 * area), cy / (6 * area))

    def contains(self, p: Point) -> bool:
        if any(edge.contains_point(p) for edge in self.edges()):
            return True
        inside = False
        for edge in self.edges():
            a, b = edge.a, edge.b
            if (a.y > p.y) != (b.y > p.y):
                x_cross = a.x + (p.y - a.y) * (b.x - a.x) / (b.y - a.y)
                if x_cross > p.x:
                    inside = not inside
        return inside

    def is_simple(self) -> bool:
        """No two edges cross or overlap, except neighbours sharing their common vertex."""
        edges = self.edges()
        n = len(edges)
        for i in range(n):
            for j in range(i + 1, n):
                shared = edges[i].intersection(edges[j])
                if shared is None:
                    continue
                adjacent = j == i + 1 or (i == 0 and j == n - 1)
                if adjacent and isinstance(shared, Point):
                    continue
                return False
        return True
