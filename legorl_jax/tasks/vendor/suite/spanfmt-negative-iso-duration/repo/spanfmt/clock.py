"""Clock notation: [-]HH:MM:SS[.ffffff], hours unbounded (100:00:00 is fine)."""

from __future__ import annotations

import re
from datetime import timedelta

from spanfmt.errors import DurationError
from spanfmt.units import amount_micros, from_micros, seconds_text, to_micros

_CLOCK = re.compile(r"^(?P<sign>[-+])?(?:(?P<h>\d+):)?(?P<m>\d{1,2}):(?P<s>\d{1,2}(?:\.\d{1,6})?)$")


def parse_clock(text: str) -> timedelta:
    m = _CLOCK.match(text.strip()) if isinstance(text, str) else None
    if not m:
        raise DurationError(f"not a clock duration: {text!r}")
    minutes = int(m["m"])
    if int(float(m["s"])) > 59 or (m["h"] is not None and minutes > 59):
        raise DurationError(f"minutes and seconds must be below 60: {text!r}")
    micros = amount_micros(m["h"] or "0", "h") + amount_micros(m["m"], "m") + amount_micros(m["s"], "s")
    return from_micros(-micros if m["sign"] == "-" else micros)


def format_clock(td: timedelta) -> str:
    if not isinstance(td, timedelta):
        raise TypeError(f"expected a timedelta, got {type(td).__name__}")
    micros = to_micros(td)
    sign = "-" if micros < 0 else ""
    hours, rest = divmod(abs(micros), 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    secs = seconds_text(rest)
    whole = secs.split(".")[0]
    return f"{sign}{hours:02d}:{minutes:02d}:{'0' * (2 - len(whole))}{secs}"
