"""Holiday rules: each computes the date it falls on in a given year."""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import date, timedelta

from bizdays.observance import NONE, POLICIES


def easter_sunday(year: int) -> date:
    """Gregorian Easter (anonymous Gregorian algorithm, Meeus/Jones/Butcher)."""
    a, b, c = year % 19, year // 100, year % 100
    d, e = divmod(b, 4)
    f = (b + 8) // 25
    g = (b - f + 1) // 3
    h = (19 * a + b - d - g + 15) % 30
    i, k = divmod(c, 4)
    l = (32 + 2 * e + 2 * i - h - k) % 7
    m = (a + 11 * h + 22 * l) // 451
    month, day = divmod(h + l - 7 * m + 114, 31)
    return date(year, month, day + 1)


@dataclass(frozen=True)
class FixedDate:
    name: str
    month: int
    day: int
    observance: str = NONE

    def __post_init__(self) -> None:
        if self.observance not in POLICIES:
            raise ValueError(f"{self.name}: observance must be one of {POLICIES}, got {self.observance!r}")
        date(2000, self.month, self.day)  # validates month/day (2000 is a leap year, so Feb 29 passes)

    def actual(self, year: int) -> date | None:
        if self.month == 2 and self.day == 29 and not calendar.isleap(year):
            return None
        return date(year, self.month, self.day)


@dataclass(frozen=True)
class NthWeekday:
    """n-th weekday of a month (n=1..5, or -1 for the last); weekday 0 is Monday."""

    name: str
    month: int
    weekday: int
    n: int
    observance: str = NONE

    def __post_init__(self) -> None:
        if self.n not in (1, 2, 3, 4, 5, -1):
            raise ValueError(f"{self.name}: n must be 1..5 or -1, got {self.n}")
        if not 0 <= self.weekday <= 6:
            raise ValueError(f"{self.name}: weekday must be 0..6, got {self.weekday}")

    def actual(self, year: int) -> date | None:
        if self.n == -1:
            last = date(year, self.month, calendar.monthrange(year, self.month)[1])
            return last - timedelta(days=(last.weekday() - self.weekday) % 7)
        first = date(year, self.month, 1)
        day = first + timedelta(days=(self.weekday - first.weekday()) % 7 + 7 * (self.n - 1))
        return day if day.month == self.month else None


@dataclass(frozen=True)
class EasterOffset:
    name: str
    offset_days: int
    observance: str = NONE

    def actual(self, year: int) -> date | None:
        return easter_sunday(year) + timedelta(days=self.offset_days)


Rule = FixedDate | NthWeekday | EasterOffset
