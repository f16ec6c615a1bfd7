"""Convex hull by Andrew's monotone chain, counter-clockwise, without collinear points."""

from __future__ import annotations

from collections.abc import Iterable

from planar.orientation import orient
from planar.point import Point


def convex_hull(points: Iterable[Point]) -> list[Point]:
    unique = sorted(set(points))
    if len(unique) <= 2:
        return unique

    def chain(ordered: list[Point]) -> list[Point]:
        out: list[Point] = []
        for p in ordered:
            while len(out) >= 2 and orient(out[-2], out[-1], p) <= 0:
                out.pop()
            out.append(p)
        return out

    lower = chain(unique)
    upper = chain(list(reversed(unique)))
    return lower[:-1] + upper[:-1]
