"""The Interval value type: a half-open range [start, end) with an optional payload."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, order=True)
class Interval:
    start: Any
    end: Any
    data: Any = field(default=None, compare=False)

    def __post_init__(self) -> None:
        try:
            empty = not self.start < self.end
        except TypeError:
            raise TypeError(
                f"interval endpoints must be comparable, got {self.start!r} and {self.end!r}"
            ) from None
        if empty:
            raise ValueError(f"interval start must be < end, got [{self.start!r}, {self.end!r})")

    def __repr__(self) -> str:
        if self.data is None:
            return f"Interval({self.start!r}, {self.end!r})"
        return f"Interval({self.start!r}, {self.end!r}, {self.data!r})"

    @property
    def length(self):
        return self.end - self.start

    def contains_point(self, point) -> bool:
        return self.start <= point < self.end

    def contains(self, other: Interval) -> bool:
        return self.start <= other.start and other.end <= self.end

    def overlaps(self, other: Interval) -> bool:
        """True when the two intervals share at least one point."""
        return self.start <= other.end and other.start <= self.end

    def touches(self, other: Interval) -> bool:
        """True when one interval ends exactly where the other begins."""
        return self.end == other.start or other.end == self.start

    def intersection(self, other: Interval) -> Interval | None:
        start = max(self.start, other.start)
        end = min(self.end, other.end)
        if start < end:
            return Interval(start, end, self.data)
        return None

    def span(self, other: Interval) -> Interval:
        """The smallest interval covering both (keeps this interval's data)."""
        return Interval(min(self.start, other.start), max(self.end, other.end), self.data)
