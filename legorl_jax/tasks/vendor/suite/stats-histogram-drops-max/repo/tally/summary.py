"""describe(): the five-number summary plus mean and standard deviation, and a text table of it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

from tally.quantiles import quantiles
from tally.running import RunningStats


@dataclass(frozen=True)
class Summary:
    count: int
    mean: float
    stdev: float
    min: float
    q1: float
    median: float
    q3: float
    max: float

    def table(self, precision: int = 4) -> str:
        rows = []
        for f in fields(self):
            value = getattr(self, f.name)
            text = str(value) if isinstance(value, int) else f"{value:.{precision}g}"
            rows.append(f"{f.name:<7}{text:>14}")
        return "\n".join(rows)


def describe(data: Iterable[float]) -> Summary:
    values = list(data)
    stats = RunningStats(values)
    if stats.count == 0:
        raise ValueError("describe() of an empty sample")
    q1, q2, q3 = quantiles(values, (0.25, 0.5, 0.75))
    stdev = stats.stdev() if stats.count > 1 else 0.0
    return Summary(stats.count, stats.mean, stdev, stats.min, q1, q2, q3, stats.max)
