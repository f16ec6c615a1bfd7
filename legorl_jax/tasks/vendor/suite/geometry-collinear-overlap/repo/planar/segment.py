"""Segment: the closed straight segment between two distinct points."""

from __future__ import annotations

from dataclasses import dataclass

from planar.orientation import EPS, orient, within_box
from planar.point import Point


@dataclass(frozen=True)
class Segment:
    a: Point
    b: Point

    def __post_init__(self) -> None:
        if not isinstance(self.a, Point) or not isinstance(self.b, Point):
            raise TypeError(f"Segment needs two Points, got {self.a!r} and {self.b!r}")
        if self.a == self.b:
            raise ValueError(f"a segment needs two distinct end points, got {self.a!r} twice")

    @property
    def length(self) -> float:
        return self.a.distance(self.b)

    @property
    def midpoint(self) -> Point:
        return Point((self.a.x + self.b.x) / 2, (self.a.y + self.b.y) / 2)

    def reversed(self) -> Segment:
        return Segment(self.b, self.a)

    def contains_point(self, p: Point) -> bool:
        return orient(self.a, self.b, p) == 0 and within_box(self.a, self.b, p)

    def intersects(self, other: Segment) -> bool:
        p1, p2, q1, q2 = self.a, self.b, other.a, other.b
        o1 = orient(p1, p2, q1)
        o2 = orient(p1, p2, q2)
        o3 = orient(q1, q2, p1)
        o4 = orient(q1, q2, p2)
        return o1 != o2 and o3 != o4

    def intersection(self, other: Segment) -> Point | Segment | None:
        """The common point, the common stretch (collinear overlap), or None."""
        if not self.intersects(other):
            return None
        d1, d2 = self.b - self.a, other.b - other.a
        denom = d1.cross(d2)
        if abs(denom) > EPS:
            t = (other.a - self.a).cross(d2) / denom
            return self.a + d1.scale(t)
        # Collinear: project the four end points on this segment's direction.
        length2 = d1.dot(d1)
        ts = sorted([(0.0, self.a), (1.0, self.b),
                     ((other.a - self.a).dot(d1) / length2, other.a),
                     ((other.b - self.a).dot(d1) / length2, other.b)], key=lambda tp: tp[0])
        start, end = ts[1][1], ts[2][1]
        if start.distance(end) <= EPS:
            return start
        return Segment(start, end)
