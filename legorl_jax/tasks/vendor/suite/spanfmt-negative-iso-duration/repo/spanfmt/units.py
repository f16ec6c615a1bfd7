"""Units, their lengths in microseconds, and the shared decimal helpers."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal, InvalidOperation

from spanfmt.errors import DurationError

MICROS = {
    "w": 7 * 86_400_000_000,
    "d": 86_400_000_000,
    "h": 3_600_000_000,
    "m": 60_000_000,
    "s": 1_000_000,
    "ms": 1_000,
    "us": 1,
}
ALIASES = {
    "weeks": "w", "week": "w", "wk": "w",
    "days": "d", "day": "d",
    "hours": "h", "hour": "h", "hr": "h", "hrs": "h",
    "minutes": "m", "minute": "m", "min": "m", "mins": "m",
    "seconds": "s", "second": "s", "sec": "s", "secs": "s",
    "milliseconds": "ms", "millisecond": "ms", "msec": "ms",
    "microseconds": "us", "microsecond": "us", "µs": "us",
}


def canonical_unit(name: str) -> str:
    key = name.lower()
    unit = key if key in MICROS else ALIASES.get(key)
    if unit is None:
        raise DurationError(f"unknown unit {name!r}")
    return unit


def amount_micros(number: str, unit: str) -> int:
    """Exact decimal arithmetic, so '0.1s' is 100000 microseconds, not 99999."""
    try:
        value = Decimal(number.replace(",", "."))
    except InvalidOperation:
        raise DurationError(f"invalid number {number!r}") from None
    micros = value * MICROS[unit]
    if micros != micros.to_integral_value():
        raise DurationError(f"{number}{unit} is finer than a microsecond")
    return int(micros)


def to_micros(td: timedelta) -> int:
    return (td.days * 86_400 + td.seconds) * 1_000_000 + td.microseconds


def from_micros(micros: int) -> timedelta:
    return timedelta(microseconds=micros)


def seconds_text(micros: int) -> str:
    """Whole seconds plus a fraction with trailing zeros removed: 5_250_000 -> '5.25'."""
    whole, frac = divmod(micros, 1_000_000)
    return f"{whole}.{frac:06d}".rstrip("0") if frac else f"{whole}"
