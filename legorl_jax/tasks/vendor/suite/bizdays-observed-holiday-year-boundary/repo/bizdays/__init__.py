"""bizdays: business days over rule-based holiday calendars."""

from bizdays.calendar import BusinessCalendar
from bizdays.holidays import HolidayCalendar
from bizdays.presets import US_FEDERAL, UK_ENGLAND
from bizdays.rules import EasterOffset, FixedDate, NthWeekday

__all__ = ["BusinessCalendar", "EasterOffset", "FixedDate", "HolidayCalendar", "NthWeekday", "UK_ENGLAND", "US_FEDERAL"]
