"""Parsing RFC 3339 date-time strings into aware datetimes."""

from __future__ import annotations

import re
from datetime import datetime

from stamp3339.offsets import OffsetError, offset_tzinfo, parse_offset

_TIMESTAMP = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})[Tt ](?P<h>\d{2}):(?P<m>\d{2}):(?P<s>\d{2})"
    r"(?:\.(?P<frac>\d{1,9}))?(?P<off>[Zz]|[+-]\d{2}:?\d{2})$"
)


class TimestampError(ValueError):
    """Raised for text that is not an RFC 3339 date-time."""


def parse(text: str) -> datetime:
    """Parses a full RFC 3339 date-time; the result carries a fixed-offset tzinfo."""
    if not isinstance(text, str):
        raise TypeError(f"timestamp must be a str, got {type(text).__name__}")
    m = _TIMESTAMP.match(text.strip())
    if not m:
        raise TimestampError(f"not an RFC 3339 timestamp: {text!r}")
    year, month, day = (int(p) for p in m["date"].split("-"))
    hour, minute, second = int(m["h"]), int(m["m"]), int(m["s"])
    if second == 60:
        raise TimestampError(f"leap seconds are not supported: {text!r}")
    # Fractions beyond microseconds are truncated, not rounded, so parsing never moves a time forward
    # into the next second (or day).
    micro = int((m["frac"] or "").ljust(6, "0")[:6])
    try:
        minutes = parse_offset(m["off"])
        tz = offset_tzinfo(minutes)
    except OffsetError as exc:
        raise TimestampError(f"{exc} in {text!r}") from None
    try:
        return datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)
    except ValueError as exc:
        raise TimestampError(f"{exc}: {text!r}") from None


def parse_many(lines: list[str]) -> list[datetime]:
    """Parses each line, reporting the 1-based line number of the first bad one."""
    out = []
    for number, line in enumerate(lines, start=1):
        try:
            out.append(parse(line))
        except TimestampError as exc:
            raise TimestampError(f"line {number}: {exc}") from None
    return out
