"""Dimension: integer exponents over the SI base dimensions.

Order of the exponent tuple: length, mass, time, temperature, current, amount.
"""

from __future__ import annotations

from dataclasses import dataclass

_NAMES = ("length", "mass", "time", "temperature", "current", "amount")
_SYMBOLS = ("m", "kg", "s", "K", "A", "mol")


class DimensionError(ValueError):
    pass


@dataclass(frozen=True)
class Dimension:
    exponents: tuple[int, ...] = (0, 0, 0, 0, 0, 0)

    def __post_init__(self) -> None:
        if len(self.exponents) != len(_NAMES):
            raise ValueError(f"a Dimension has {len(_NAMES)} exponents, got {self.exponents!r}")

    @classmethod
    def base(cls, name: str) -> Dimension:
        exps = [0] * len(_NAMES)
        exps[_NAMES.index(name)] = 1
        return cls(tuple(exps))

    def __mul__(self, other: Dimension) -> Dimension:
        return Dimension(tuple(a + b for a, b in zip(self.exponents, other.exponents)))

    def __truediv__(self, other: Dimension) -> Dimension:
        return Dimension(tuple(a - b for a, b in zip(self.exponents, other.exponents)))

    def __pow__(self, power: int) -> Dimension:
        return Dimension(tuple(a * power for a in self.exponents))

    @property
    def dimensionless(self) -> bool:
        return not any(self.exponents)

    def __str__(self) -> str:
        if self.dimensionless:
            return "dimensionless"
        parts = []
        for symbol, exp in zip(_SYMBOLS, self.exponents):
            if exp == 1:
                parts.append(symbol)
            elif exp:
                parts.append(f"{symbol}^{exp}")
        return "*".join(parts)

    def describe(self) -> str:
        """A friendlier name for common dimensions, e.g. 'length' or 'velocity'."""
        return _FRIENDLY.get(self.exponents, str(self))


_FRIENDLY = {
    (1, 0, 0, 0, 0, 0): "length",
    (0, 1, 0, 0, 0, 0): "mass",
    (0, 0, 1, 0, 0, 0): "time",
    (0, 0, 0, 1, 0, 0): "temperature",
    (3, 0, 0, 0, 0, 0): "volume",
    (2, 0, 0, 0, 0, 0): "area",
    (1, 0, -1, 0, 0, 0): "velocity",
    (1, 0, -2, 0, 0, 0): "acceleration",
    (1, 1, -2, 0, 0, 0): "force",
    (2, 1, -2, 0, 0, 0): "energy",
    (-1, 1, -2, 0, 0, 0): "pressure",
}
