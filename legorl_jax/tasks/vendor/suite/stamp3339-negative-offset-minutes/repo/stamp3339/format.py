"""Formatting aware datetimes as RFC 3339 text."""

from __future__ import annotations

from datetime import datetime

from stamp3339.offsets import format_offset, tzinfo_minutes

_PRECISIONS = (0, 3, 6)


def format_timestamp(dt: datetime, precision: int | None = None, utc_as_z: bool = True) -> str:
    """precision: 0, 3 or 6 fractional digits; None writes microseconds only when they are non-zero."""
    if not isinstance(dt, datetime):
        raise TypeError(f"expected a datetime, got {type(dt).__name__}")
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(f"refusing to format a naive datetime: {dt!r}")
    if precision is not None and precision not in _PRECISIONS:
        raise ValueError(f"precision must be one of {_PRECISIONS} or None, got {precision!r}")
    text = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if precision is None:
        precision = 6 if dt.microsecond else 0
    if precision:
        text += "." + f"{dt.microsecond:06d}"[:precision]
    return text + format_offset(tzinfo_minutes(dt.tzinfo, dt), utc_as_z=utc_as_z)
