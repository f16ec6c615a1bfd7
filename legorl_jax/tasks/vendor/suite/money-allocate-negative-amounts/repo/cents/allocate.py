"""Splitting an amount into parts that add up exactly (largest-remainder method).

Each part's exact share total * ratio / sum(ratios) is computed as a Fraction of minor units and
rounded; the minor units lost in rounding are then handed out one by one, to the parts that lost
the most first, earliest part first on ties. Working in minor units keeps the sum exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from cents.money import Money


def _check_ratios(ratios: Sequence[object]) -> list[Fraction]:
    if not ratios:
        raise ValueError("allocate needs at least one ratio")
    out = []
    for r in ratios:
        if isinstance(r, bool) or not isinstance(r, (int, Fraction)) or r < 0:
            raise ValueError(f"ratios must be non-negative ints or Fractions, got {r!r}")
        out.append(Fraction(r))
    if sum(out) == 0:
        raise ValueError(f"ratios must not all be zero, got {list(ratios)!r}")
    return out


def allocate(money: Money, ratios: Sequence[int | Fraction]) -> list[Money]:
    weights = _check_ratios(ratios)
    total = money.minor
    weight_sum = sum(weights)
    exact = [total * w / weight_sum for w in weights]
    # int() rounds toward zero, so no part ends up larger than its exact share.
    parts = [int(share) for share in exact]
    leftover = total - sum(parts)
    order = sorted(range(len(parts)), key=lambda i: (-(exact[i] - parts[i]), i))
    for i in order[:leftover]:
        parts[i] += 1
    return [Money.from_minor(p, money.currency) for p in parts]


def split_evenly(money: Money, n: int) -> list[Money]:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    return allocate(money, [1] * n)
