"""Shorthand durations: '1h 30m', '2d4h', '-90s', '1.5 hours'."""

from __future__ import annotations

import re
from datetime import timedelta

from spanfmt.errors import DurationError
from spanfmt.units import MICROS, amount_micros, canonical_unit, from_micros, seconds_text, to_micros

_PART = re.compile(r"(\d+(?:[.,]\d+)?)\s*([a-zA-Zµ]+)")
_ORDER = ("w", "d", "h", "m", "s")


def parse_human(text: str) -> timedelta:
    if not isinstance(text, str):
        raise TypeError(f"duration must be a str, got {type(text).__name__}")
    body = text.strip()
    sign = 1
    if body[:1] in "+-" and body:
        sign = -1 if body[0] == "-" else 1
        body = body[1:].lstrip()
    pos = 0
    micros = 0
    seen: set[str] = set()
    for m in _PART.finditer(body):
        if body[pos : m.start()].strip(" ,") or body[pos : m.start()].count(",") > 1:
            break
        unit = canonical_unit(m.group(2))
        if unit in seen:
            raise DurationError(f"unit {unit!r} given twice in {text!r}")
        seen.add(unit)
        micros += amount_micros(m.group(1), unit)
        pos = m.end()
    if not seen or body[pos:].strip():
        raise DurationError(f"not a duration: {text!r}")
    return from_micros(sign * micros)


def format_human(td: timedelta, max_units: int | None = None, spaces: bool = True) -> str:
    """'1h 30m'; max_units keeps only the largest units (the rest is truncated, not rounded)."""
    if not isinstance(td, timedelta):
        raise TypeError(f"expected a timedelta, got {type(td).__name__}")
    if max_units is not None and max_units < 1:
        raise ValueError(f"max_units must be >= 1, got {max_units}")
    micros = to_micros(td)
    sign = "-" if micros < 0 else ""
    rest = abs(micros)
    parts: list[str] = []
    for unit in _ORDER:
        size = MICROS[unit]
        count, rest = divmod(rest, size)
        if unit == "s" and (count or rest):
            parts.append(seconds_text(count * size + rest) + "s")
            rest = 0
        elif count:
            parts.append(f"{count}{unit}")
    if max_units is not None:
        parts = parts[:max_units]
    return sign + (" " if spaces else "").join(parts or ["0s"])
