"""convert(): the one-call interface."""

from __future__ import annotations

from unitconv.quantity import Quantity


def convert(value: float, from_unit: str, to_unit: str, registry=None) -> float:
    return Quantity(value, from_unit, registry).to(to_unit).value
