"""Quantity: a value with a unit expression; converts, adds and compares across units."""

from __future__ import annotations

from functools import total_ordering

from unitconv.dimension import DimensionError
from unitconv.parse import parse_unit
from unitconv.registry import DEFAULT_REGISTRY


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"quantity value must be a number, got {value!r}")
    return value


def to_si(value: float, unit: str, registry) -> tuple[float, object]:
    """(value in SI base units, dimension) of `value` expressed in `unit`."""
    if unit in registry:
        u = registry[unit]
        return u.to_si(value), u.dimension
    factor, dimension = parse_unit(unit, registry)
    return value * factor, dimension


def from_si(value: float, unit: str, registry) -> tuple[float, object]:
    if unit in registry:
        u = registry[unit]
        return u.from_si(value), u.dimension
    factor, dimension = parse_unit(unit, registry)
    return value / factor, dimension


@total_ordering
class Quantity:
    __slots__ = ("value", "unit", "_registry")

    def __init__(self, value: float, unit: str, registry=None) -> None:
        self.value = _number(value)
        self._registry = registry if registry is not None else DEFAULT_REGISTRY
        parse_unit(unit, self._registry)  # validate early
        self.unit = unit

    def to(self, unit: str) -> Quantity:
        si, dim = to_si(self.value, self.unit, self._registry)
        result, target_dim = from_si(si, unit, self._registry)
        if dim != target_dim:
            raise DimensionError(
                f"cannot convert {self.unit!r} ({dim.describe()}) to {unit!r} ({target_dim.describe()})")
        return Quantity(float(result), unit, self._registry)

    def _other_in_my_unit(self, other: Quantity) -> float:
        if not isinstance(other, Quantity):
            raise TypeError(f"expected a Quantity, got {type(other).__name__}")
        return other.to(self.unit).value

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.value + self._other_in_my_unit(other), self.unit, self._registry)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.value - self._other_in_my_unit(other), self.unit, self._registry)

    def __mul__(self, scalar: float) -> Quantity:
        return Quantity(self.value * _number(scalar), self.unit, self._registry)

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        try:
            return self.value == self._other_in_my_unit(other)
        except DimensionError:
            return False

    def __lt__(self, other: Quantity) -> bool:
        return self.value < self._other_in_my_unit(other)

    def __hash__(self) -> int:
        return hash(to_si(self.value, self.unit, self._registry)[0])

    def __repr__(self) -> str:
        return f"Quantity({self.value!r}, {self.unit!r})"
