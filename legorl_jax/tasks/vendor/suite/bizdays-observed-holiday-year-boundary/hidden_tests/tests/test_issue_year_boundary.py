from datetime import date

from bizdays import UK_ENGLAND, US_FEDERAL, BusinessCalendar, FixedDate, HolidayCalendar
from bizdays.observance import NEAREST_WEEKDAY, NEXT_MONDAY


def test_new_year_2022_observed_on_new_years_eve():
    cal = BusinessCalendar(US_FEDERAL)
    assert not cal.is_business_day(date(2021, 12, 31))
    assert cal.holiday_name(date(2021, 12, 31)) == "New Year's Day (observed)"


def test_adding_days_across_the_boundary():
    cal = BusinessCalendar(US_FEDERAL)
    assert cal.add_business_days(date(2021, 12, 30), 1) == date(2022, 1, 3)
    assert cal.add_business_days(date(2022, 1, 3), -1) == date(2021, 12, 30)
    assert cal.business_days_between(date(2021, 12, 27), date(2022, 1, 7)) == 8


def test_year_tables_hold_only_dates_of_that_year():
    for year in (2021, 2022, 2027, 2028):
        assert all(d.year == year for d in US_FEDERAL.holidays_for_year(year))
    assert date(2021, 12, 31) in US_FEDERAL.holidays_for_year(2021)


def test_holiday_moved_forward_into_next_year():
    year_end = HolidayCalendar("bank", [FixedDate("Year End", 12, 31, NEXT_MONDAY)])
    cal = BusinessCalendar(year_end)
    assert cal.holiday_name(date(2024, 1, 1)) == "Year End (observed)"
    assert cal.next_business_day(date(2023, 12, 29)) == date(2024, 1, 2)
    assert cal.holidays_between(date(2023, 12, 1), date(2024, 1, 31)) == [(date(2024, 1, 1), "Year End (observed)")]


def test_holidays_between_lists_the_moved_new_year_once():
    cal = BusinessCalendar(US_FEDERAL)
    got = cal.holidays_between(date(2021, 12, 20), date(2022, 1, 20))
    assert got == [
        (date(2021, 12, 24), "Christmas Day (observed)"),
        (date(2021, 12, 31), "New Year's Day (observed)"),
        (date(2022, 1, 17), "Martin Luther King Jr. Day"),
    ]


def test_same_year_observance_unchanged():
    cal = BusinessCalendar(UK_ENGLAND)
    assert cal.holiday_name(date(2022, 1, 3)) == "New Year's Day (observed)"
    assert BusinessCalendar(HolidayCalendar("x", [FixedDate("Mid", 7, 4, NEAREST_WEEKDAY)])).holiday_name(
        date(2021, 7, 5)
    ) == "Mid (observed)"
