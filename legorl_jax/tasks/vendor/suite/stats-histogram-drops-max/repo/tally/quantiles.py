"""Quantiles of a finite sample.

`method="linear"` is the R-7 / NumPy default: the q-quantile sits at position q*(n-1) of the sorted
data, interpolating between neighbours. `method="nearest"` picks the element at round(q*(n-1)) with
ties rounded half-to-even, like NumPy's "nearest".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tally.running import _number

_METHODS = ("linear", "lower", "higher", "nearest")


def _sorted(data: Iterable[float]) -> list[float]:
    values = sorted(_number(x) for x in data)
    if not values:
        raise ValueError("quantile of an empty sample")
    return values


def _at(values: Sequence[float], q: float, method: str) -> float:
    position = q * (len(values) - 1)
    lower = int(position)
    upper = min(lower + 1, len(values) - 1)
    if method == "lower":
        return values[lower]
    if method == "higher":
        return values[upper] if position > lower else values[lower]
    if method == "nearest":
        return values[round(position)]
    fraction = position - lower
    return values[lower] + (values[upper] - values[lower]) * fraction


def quantile(data: Iterable[float], q: float, method: str = "linear") -> float:
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    if not 0 <= q <= 1:
        raise ValueError(f"q must be within [0, 1], got {q!r}")
    return _at(_sorted(data), q, method)


def quantiles(data: Iterable[float], qs: Iterable[float], method: str = "linear") -> list[float]:
    """Several quantiles with one sort."""
    values = _sorted(data)
    out = []
    for q in qs:
        if not 0 <= q <= 1:
            raise ValueError(f"q must be within [0, 1], got {q!r}")
        out.append(_at(values, q, method))
    return out


def median(data: Iterable[float]) -> float:
    return quantile(data, 0.5)


def iqr(data: Iterable[float]) -> float:
    q1, q3 = quantiles(data, (0.25, 0.75))
    return q3 - q1
