"""BusinessCalendar: weekends plus a holiday calendar, with cached per-year holiday tables."""

from __future__ import annotations

from datetime import date, timedelta

from bizdays.holidays import HolidayCalendar

_MAX_SCAN = 3660  # ten years without a business day means the calendar is misconfigured


class BusinessCalendar:
    def __init__(self, holidays: HolidayCalendar, weekend: tuple[int, ...] = (5, 6)) -> None:
        if len(set(weekend)) >= 7 or any(not 0 <= d <= 6 for d in weekend):
            raise ValueError(f"weekend must be distinct weekdays 0..6 leaving at least one, got {weekend!r}")
        self.holidays = holidays
        self.weekend = frozenset(weekend)
        self._years: dict[int, dict[date, str]] = {}

    def _table(self, year: int) -> dict[date, str]:
        if year not in self._years:
            self._years[year] = self.holidays.holidays_for_year(year)
        return self._years[year]

    def holiday_name(self, day: date) -> str | None:
        return self._table(day.year).get(day)

    def is_business_day(self, day: date) -> bool:
        return day.weekday() not in self.weekend and self.holiday_name(day) is None

    def _step(self, day: date, direction: int) -> date:
        for _ in range(_MAX_SCAN):
            day += timedelta(days=direction)
            if self.is_business_day(day):
                return day
        raise RuntimeError(f"no business day within {_MAX_SCAN} days of {day}")

    def next_business_day(self, day: date) -> date:
        """The first business day strictly after day."""
        return self._step(day, 1)

    def previous_business_day(self, day: date) -> date:
        return self._step(day, -1)

    def roll_forward(self, day: date) -> date:
        """day itself if it is a business day, else the next one (the 'following' convention)."""
        return day if self.is_business_day(day) else self.next_business_day(day)

    def add_business_days(self, day: date, n: int) -> date:
        """Moves n business days (backwards when negative); n=0 rolls a non-business day forward."""
        if not isinstance(n, int):
            raise TypeError(f"n must be an int, got {type(n).__name__}")
        if n == 0:
            return self.roll_forward(day)
        direction = 1 if n > 0 else -1
        for _ in range(abs(n)):
            day = self._step(day, direction)
        return day

    def business_days_between(self, start: date, end: date) -> int:
        """Business days d with start <= d < end (negative when end is before start)."""
        if end < start:
            return -self.business_days_between(end, start)
        count = 0
        day = start
        while day < end:
            count += self.is_business_day(day)
            day += timedelta(days=1)
        return count

    def holidays_between(self, start: date, end: date) -> list[tuple[date, str]]:
        """Observed holidays d with start <= d <= end, in date order."""
        out: list[tuple[date, str]] = []
        for year in range(start.year, end.year + 1):
            out += [(d, n) for d, n in self._table(year).items() if start <= d <= end]
        return sorted(out)
