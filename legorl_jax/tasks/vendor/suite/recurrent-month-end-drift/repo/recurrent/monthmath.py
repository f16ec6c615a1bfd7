"""Calendar arithmetic on months: lengths, leap years and clamped month addition."""

from __future__ import annotations

from datetime import date

_LENGTHS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def is_leap_year(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year: int, month: int) -> int:
    if not 1 <= month <= 12:
        raise ValueError(f"month must be in 1..12, got {month}")
    return 29 if month == 2 and is_leap_year(year) else _LENGTHS[month - 1]


def add_months(d: date, months: int) -> date:
    """Moves by whole months, clamping the day to the end of a shorter month (Jan 31 + 1 -> Feb 28/29)."""
    index = d.year * 12 + (d.month - 1) + months
    year, month = divmod(index, 12)
    month += 1
    if not 1 <= year <= 9999:
        raise OverflowError(f"{d} + {months} months is outside the supported years")
    return date(year, month, min(d.day, days_in_month(year, month)))


def add_years(d: date, years: int) -> date:
    return add_months(d, 12 * years)
