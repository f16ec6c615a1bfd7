"""ISO 8601 durations (PnW or PnDTnHnMnS; Y and M date parts are refused)."""

from __future__ import annotations

import re
from datetime import timedelta

from spanfmt.errors import DurationError
from spanfmt.units import amount_micros, from_micros, seconds_text

_NUM = r"\d+(?:[.,]\d+)?"
_ISO = re.compile(
    rf"^(?P<sign>[-+])?P(?:(?P<w>{_NUM})W)?(?:(?P<y>{_NUM})Y)?(?:(?P<mo>{_NUM})M)?(?:(?P<d>{_NUM})D)?"
    rf"(?:T(?:(?P<h>{_NUM})H)?(?:(?P<m>{_NUM})M)?(?:(?P<s>{_NUM})S)?)?$"
)


def parse_iso(text: str) -> timedelta:
    if not isinstance(text, str):
        raise TypeError(f"duration must be a str, got {type(text).__name__}")
    m = _ISO.match(text.strip().upper())
    if not m or text.strip().upper() in ("P", "PT", "-P", "+P") or text.strip().upper().endswith("T"):
        raise DurationError(f"not an ISO 8601 duration: {text!r}")
    if m["y"] or m["mo"]:
        raise DurationError(f"years and months have no fixed length: {text!r}")
    micros = 0
    for group, unit in (("w", "w"), ("d", "d"), ("h", "h"), ("m", "m"), ("s", "s")):
        if m[group]:
            micros += amount_micros(m[group], unit)
    return from_micros(-micros if m["sign"] == "-" else micros)


def format_iso(td: timedelta, weeks: bool = False) -> str:
    """Canonical form: days, hours, minutes, seconds (fraction trimmed); 'PT0S' for zero.

    weeks=True writes whole multiples of seven days as PnW (ISO does not allow W mixed with others).
    """
    if not isinstance(td, timedelta):
        raise TypeError(f"expected a timedelta, got {type(td).__name__}")
    if not td:
        return "PT0S"
    days = td.days
    hours, rest = divmod(td.seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if weeks and days % 7 == 0 and not (hours or minutes or seconds or td.microseconds):
        return f"P{days // 7}W"
    date_part = f"{days}D" if days else ""
    time_part = ""
    if hours:
        time_part += f"{hours}H"
    if minutes:
        time_part += f"{minutes}M"
    if seconds or td.microseconds:
        time_part += seconds_text(seconds * 1_000_000 + td.microseconds) + "S"
    return "P" + date_part + ("T" + time_part if time_part else "")
