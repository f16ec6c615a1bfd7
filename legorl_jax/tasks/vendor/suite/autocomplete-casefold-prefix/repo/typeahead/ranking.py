"""Choosing the best k completions: highest weight first, ties alphabetical by display form."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class Entry:
    display: str
    weight: float


def _order(entry: Entry) -> tuple[float, str, str]:
    # casefold first so "apple" and "Banana" sort like a person expects; the raw string breaks ties.
    return (-entry.weight, entry.display.casefold(), entry.display)


def top_k(entries: Iterable[Entry], k: int) -> list[Entry]:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k!r}")
    return heapq.nsmallest(k, entries, key=_order)
