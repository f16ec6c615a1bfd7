"""Ready-made holiday calendars."""

from __future__ import annotations

from bizdays.holidays import HolidayCalendar
from bizdays.observance import NEAREST_WEEKDAY, NEXT_MONDAY
from bizdays.rules import EasterOffset, FixedDate, NthWeekday

MON, THU = 0, 3

US_FEDERAL = HolidayCalendar(
    "US federal",
    [
        FixedDate("New Year's Day", 1, 1, NEAREST_WEEKDAY),
        NthWeekday("Martin Luther King Jr. Day", 1, MON, 3),
        NthWeekday("Washington's Birthday", 2, MON, 3),
        NthWeekday("Memorial Day", 5, MON, -1),
        FixedDate("Juneteenth", 6, 19, NEAREST_WEEKDAY),
        FixedDate("Independence Day", 7, 4, NEAREST_WEEKDAY),
        NthWeekday("Labor Day", 9, MON, 1),
        NthWeekday("Columbus Day", 10, MON, 2),
        FixedDate("Veterans Day", 11, 11, NEAREST_WEEKDAY),
        NthWeekday("Thanksgiving Day", 11, THU, 4),
        FixedDate("Christmas Day", 12, 25, NEAREST_WEEKDAY),
    ],
)

UK_ENGLAND = HolidayCalendar(
    "England and Wales",
    [
        FixedDate("New Year's Day", 1, 1, NEXT_MONDAY),
        EasterOffset("Good Friday", -2),
        EasterOffset("Easter Monday", 1),
        NthWeekday("Early May bank holiday", 5, MON, 1),
        NthWeekday("Spring bank holiday", 5, MON, -1),
        NthWeekday("Summer bank holiday", 8, MON, -1),
        FixedDate("Christmas Day", 12, 25, NEXT_MONDAY),
    ],
)
