"""RunningStats: count, mean, variance, min and max in one pass (Welford's algorithm).

Welford's update avoids the catastrophic cancellation of the textbook sum-of-squares formula;
`merge` combines two accumulators with Chan et al.'s parallel formula, so per-shard statistics can
be reduced without revisiting the data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"statistics need numbers, got {value!r}")
    if math.isnan(value):
        raise ValueError("statistics of NaN are undefined")
    return float(value)


class RunningStats:
    def __init__(self, values: Iterable[float] = ()) -> None:
        self.count = 0
        self.mean = 0.0
        self._m2 = 0.0
        self.min = math.inf
        self.max = -math.inf
        for value in values:
            self.push(value)

    def push(self, value: float) -> None:
        x = _number(value)
        self.count += 1
        delta = x - self.mean
        self.mean += delta / self.count
        self._m2 += delta * (x - self.mean)
        self.min = min(self.min, x)
        self.max = max(self.max, x)

    def variance(self, ddof: int = 1) -> float:
        if ddof not in (0, 1):
            raise ValueError(f"ddof must be 0 (population) or 1 (sample), got {ddof!r}")
        if self.count - ddof <= 0:
            raise ValueError(f"variance with ddof={ddof} needs more than {ddof} values, got {self.count}")
        return self._m2 / (self.count - ddof)

    def stdev(self, ddof: int = 1) -> float:
        return math.sqrt(self.variance(ddof))

    def merge(self, other: RunningStats) -> RunningStats:
        """A new accumulator equal to having pushed both inputs' values."""
        out = RunningStats()
        out.count = self.count + other.count
        if out.count == 0:
            return out
        delta = other.mean - self.mean
        out.mean = self.mean + delta * other.count / out.count
        out._m2 = self._m2 + other._m2 + delta * delta * self.count * other.count / out.count
        out.min = min(self.min, other.min)
        out.max = max(self.max, other.max)
        return out
