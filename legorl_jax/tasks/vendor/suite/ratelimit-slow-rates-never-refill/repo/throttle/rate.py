"""Rates: "how many per how long", parsed from strings such as "10/minute" or "100/15m"."""

from __future__ import annotations

import re
from dataclasses import dataclass

_PERIODS = {
    "s": 1, "sec": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
}
_RATE = re.compile(r"^\s*(\d+)\s*(?:/|per)\s*(\d*)\s*([a-z]+)\s*$")


@dataclass(frozen=True)
class Rate:
    limit: int
    period: int  # seconds

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ValueError(f"rate limit must be a positive int, got {self.limit!r}")
        if isinstance(self.period, bool) or not isinstance(self.period, int) or self.period < 1:
            raise ValueError(f"rate period must be a positive number of seconds, got {self.period!r}")

    @property
    def per_second(self) -> float:
        """Tokens earned back per second."""
        return self.limit // self.period

    @property
    def interval(self) -> float:
        """Seconds between two tokens."""
        return self.period / self.limit

    def __str__(self) -> str:
        return f"{self.limit}/{self.period}s"


def parse_rate(text: str | Rate) -> Rate:
    if isinstance(text, Rate):
        return text
    if not isinstance(text, str):
        raise TypeError(f"rate must be a str like '10/minute' or a Rate, got {type(text).__name__}")
    match = _RATE.match(text.lower())
    if match is None:
        raise ValueError(f"cannot parse rate {text!r}; expected e.g. '10/minute' or '100/15m'")
    limit, count, unit = match.groups()
    if unit not in _PERIODS:
        raise ValueError(f"unknown period {unit!r} in rate {text!r}")
    multiple = int(count) if count else 1
    if multiple < 1:
        raise ValueError(f"period count must be positive in rate {text!r}")
    return Rate(int(limit), multiple * _PERIODS[unit])
