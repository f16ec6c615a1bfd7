"""UTC offsets: text such as '+05:30' or 'Z' to signed minutes, and back."""

from __future__ import annotations

import re
from datetime import timedelta, timezone

_OFFSET = re.compile(r"^(?P<sign>[+-])(?P<hh>\d{2}):?(?P<mm>\d{2})$")
MAX_MINUTES = 23 * 60 + 59


class OffsetError(ValueError):
    """Raised for offset text or values outside RFC 3339's grammar."""


def parse_offset(text: str) -> int:
    """'Z' -> 0, '+05:30' -> 330, '-0800' -> -480. '-00:00' (unknown local offset) is 0."""
    if not isinstance(text, str):
        raise TypeError(f"offset must be a str, got {type(text).__name__}")
    if text in ("Z", "z"):
        return 0
    m = _OFFSET.match(text)
    if not m:
        raise OffsetError(f"invalid UTC offset {text!r}; expected Z, +HH:MM or -HH:MM")
    hours, minutes = int(m["hh"]), int(m["mm"])
    if hours > 23 or minutes > 59:
        raise OffsetError(f"UTC offset out of range: {text!r}")
    sign = -1 if m["sign"] == "-" else 1
    return sign * hours * 60 + minutes


def format_offset(minutes: int, utc_as_z: bool = False) -> str:
    if not isinstance(minutes, int) or isinstance(minutes, bool):
        raise TypeError(f"offset minutes must be an int, got {minutes!r}")
    if abs(minutes) > MAX_MINUTES:
        raise OffsetError(f"offset of {minutes} minutes is outside ±23:59")
    if minutes == 0 and utc_as_z:
        return "Z"
    sign = "-" if minutes < 0 else "+"
    hh, mm = divmod(abs(minutes), 60)
    return f"{sign}{hh:02d}:{mm:02d}"


def offset_tzinfo(offset: str | int) -> timezone:
    """A fixed-offset tzinfo from offset text or signed minutes."""
    minutes = parse_offset(offset) if isinstance(offset, str) else offset
    if abs(minutes) > MAX_MINUTES:
        raise OffsetError(f"offset of {minutes} minutes is outside ±23:59")
    if minutes == 0:
        return timezone.utc
    return timezone(timedelta(minutes=minutes))


def tzinfo_minutes(tz: timezone, when=None) -> int:
    """The offset of a tzinfo in whole minutes; sub-minute offsets are not representable in RFC 3339."""
    delta = tz.utcoffset(when)
    if delta is None:
        raise OffsetError("tzinfo has no UTC offset")
    seconds = int(delta.total_seconds())
    if seconds % 60:
        raise OffsetError(f"offset {delta} is not a whole number of minutes")
    return seconds // 60
