"""Units and the registry of known units.

A Unit maps a value to SI base units as si = value * factor + offset. Units are defined from other
units: `define("ft", 12, "in")` gives ft the factor 12 * factor(in). Metric prefixes are generated
for the units that accept them.
"""

from __future__ import annotations

from dataclasses import dataclass

from unitconv.dimension import Dimension

PREFIXES = {
    "G": 1e9, "M": 1e6, "k": 1e3, "h": 1e2, "c": 1e-2, "m": 1e-3, "u": 1e-6, "n": 1e-9,
}


@dataclass(frozen=True)
class Unit:
    name: str
    dimension: Dimension
    factor: float
    offset: float = 0.0

    def to_si(self, value: float) -> float:
        return value * self.factor + self.offset

    def from_si(self, value: float) -> float:
        return (value - self.offset) / self.factor


class Registry:
    def __init__(self) -> None:
        self._units: dict[str, Unit] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._units

    def __getitem__(self, name: str) -> Unit:
        try:
            return self._units[name]
        except KeyError:
            raise KeyError(f"unknown unit {name!r}") from None

    def names(self) -> list[str]:
        return sorted(self._units)

    def _add(self, unit: Unit) -> None:
        if unit.name in self._units:
            raise ValueError(f"unit {unit.name!r} is already defined")
        self._units[unit.name] = unit

    def base(self, name: str, dimension: str, prefixes: bool = False) -> Unit:
        unit = Unit(name, Dimension.base(dimension), 1.0)
        self._add(unit)
        if prefixes:
            self.prefixed(name)
        return unit

    def define(self, name: str, factor: float | int | str, of: str, offset: float | int | str = 0,
               prefixes: bool = False, aliases: tuple[str, ...] = ()) -> Unit:
        """name = factor * `of` (+ offset, in SI units). `of` may be a compound expression."""
        from unitconv.parse import parse_unit

        ref_factor, dimension = parse_unit(of, self)
        unit = Unit(name, dimension, float(factor) * ref_factor, float(offset))
        self._add(unit)
        for alias in aliases:
            self._add(Unit(alias, unit.dimension, unit.factor, unit.offset))
        if prefixes:
            self.prefixed(name)
        return unit

    def prefixed(self, name: str) -> None:
        unit = self[name]
        for prefix, scale in PREFIXES.items():
            if prefix + name in self._units:  # "kg" is a base unit, not a generated one
                continue
            self._add(Unit(prefix + name, unit.dimension, scale * unit.factor, unit.offset))


def _default() -> Registry:
    reg = Registry()
    reg.base("m", "length", prefixes=True)
    reg.base("kg", "mass")
    reg.define("g", "0.001", "kg", prefixes=True)
    reg.base("s", "time", prefixes=True)
    reg.base("K", "temperature")
    reg.base("A", "current", prefixes=True)
    reg.base("mol", "amount", prefixes=True)
    reg.define("min", 60, "s")
    reg.define("h", 60, "min", aliases=("hr",))
    reg.define("day", 24, "h")
    reg.define("in", "0.0254", "m")
    reg.define("ft", 12, "in")
    reg.define("yd", 3, "ft")
    reg.define("mi", 5280, "ft")
    reg.define("lb", "0.45359237", "kg")
    reg.define("oz", 1 / 16, "lb")
    reg.define("L", "0.001", "m^3", prefixes=True)
    reg.define("gal", 231, "in^3")
    reg.define("N", 1, "kg*m/s^2", prefixes=True)
    reg.define("J", 1, "N*m", prefixes=True)
    reg.define("W", 1, "J/s", prefixes=True)
    reg.define("Wh", 3600, "J", prefixes=True)
    reg.define("cal", "4.184", "J", prefixes=True)
    reg.define("Pa", 1, "N/m^2", prefixes=True)
    reg.define("bar", 100000, "Pa")
    reg.define("degC", 1, "K", offset="273.15")
    reg.define("degF", 5 / 9, "K", offset=273.15 - 32 * 5 / 9)
    return reg


DEFAULT_REGISTRY = _default()
