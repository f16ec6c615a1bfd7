"""Orientation predicate: which side of line a->b does c lie on?"""

from __future__ import annotations

from planar.point import Point

EPS = 1e-9


def orient(a: Point, b: Point, c: Point) -> int:
    """+1 if a, b, c turn counter-clockwise, -1 if clockwise, 0 if collinear (within EPS)."""
    value = (b - a).cross(c - a)
    if value > EPS:
        return 1
    if value < -EPS:
        return -1
    return 0


def within_box(a: Point, b: Point, c: Point) -> bool:
    """True when c lies in the bounding box of a and b (used for collinear points)."""
    return (min(a.x, b.x) - EPS <= c.x <= max(a.x, b.x) + EPS
            and min(a.y, b.y) - EPS <= c.y <= max(a.y, b.y) + EPS)
