"""Equal-width histograms.

Bins are [e0, e1), [e1, e2), ..., [e_{n-1}, e_n]: half-open except the last, which is closed so the
maximum of an automatically chosen range is counted. Values outside an explicit range are counted in
`outside` rather than dropped silently.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from dataclasses import dataclass

from tally.running import _number


@dataclass(frozen=True)
class Histogram:
    counts: list[int]
    edges: list[float]
    outside: int = 0

    @property
    def total(self) -> int:
        return sum(self.counts)

    def bin_of(self, value: float) -> int | None:
        """Index of the bin that holds `value`, or None when it is outside the edges."""
        lo, hi = self.edges[0], self.edges[-1]
        if not lo <= value <= hi:
            return None
        width = (hi - lo) / len(self.counts)
        return min(int((value - lo) / width), len(self.counts) - 1)

    def render(self, width: int = 40, char: str = "#") -> str:
        """A text bar chart, one line per bin, bars scaled to the fullest bin."""
        peak = max(self.counts) or 1
        lines = []
        for i, count in enumerate(self.counts):
            bar = char * round(count / peak * width)
            lines.append(f"[{self.edges[i]:>10.4g}, {self.edges[i + 1]:>10.4g}) {count:>6} {bar}")
        return "\n".join(lines)


def histogram(data: Iterable[float], bins: int = 10, range: tuple[float, float] | None = None) -> Histogram:
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise ValueError(f"bins must be a positive int, got {bins!r}")
    values = [_number(x) for x in data]
    if range is None:
        if not values:
            raise ValueError("histogram of an empty sample needs an explicit range")
        lo, hi = min(values), max(values)
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
    else:
        lo, hi = float(range[0]), float(range[1])
        if not lo < hi:
            raise ValueError(f"range must satisfy low < high, got {range!r}")
    width = (hi - lo) / bins
    edges = [lo + i * width for i in builtins.range(bins)] + [hi]
    counts = [0] * bins
    outside = 0
    for x in values:
        index = int((x - lo) / width)
        if lo <= x and index < bins:
            counts[index] += 1
        else:
            outside += 1
    return Histogram(counts, edges, outside)

