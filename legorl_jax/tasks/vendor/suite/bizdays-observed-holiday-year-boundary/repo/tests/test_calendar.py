from datetime import date

from bizdays import UK_ENGLAND, US_FEDERAL, BusinessCalendar, HolidayCalendar

US = BusinessCalendar(US_FEDERAL)


def test_readme_examples():
    assert not US.is_business_day(date(2024, 7, 4))
    assert US.add_business_days(date(2024, 7, 3), 1) == date(2024, 7, 5)
    assert US.business_days_between(date(2024, 1, 1), date(2024, 2, 1)) == 21


def test_sunday_holiday_observed_on_monday():
    assert US.holiday_name(date(2021, 7, 5)) == "Independence Day (observed)"
    assert not US.is_business_day(date(2021, 7, 5))


def test_saturday_christmas_observed_friday():
    assert US.holiday_name(date(2021, 12, 24)) == "Christmas Day (observed)"


def test_add_negative_business_days():
    assert US.add_business_days(date(2024, 5, 28), -1) == date(2024, 5, 24)


def test_roll_forward_and_zero_days():
    assert US.add_business_days(date(2024, 6, 15), 0) == date(2024, 6, 17)


def test_between_is_antisymmetric():
    a, b = date(2024, 3, 1), date(2024, 4, 15)
    assert US.business_days_between(b, a) == -US.business_days_between(a, b)


def test_uk_easter_and_substitute_christmas():
    uk = BusinessCalendar(UK_ENGLAND)
    assert uk.holiday_name(date(2024, 4, 1)) == "Easter Monday"
    assert uk.holiday_name(date(2022, 12, 26)) == "Christmas Day (observed)"


def test_holidays_between_spans_years_in_order():
    got = US.holidays_between(date(2023, 11, 20), date(2024, 1, 20))
    assert [d for d, _ in got] == [date(2023, 11, 23), date(2023, 12, 25), date(2024, 1, 1), date(2024, 1, 15)]


def test_custom_weekend():
    cal = BusinessCalendar(HolidayCalendar("none", []), weekend=(4, 5))
    assert cal.next_business_day(date(2024, 6, 13)) == date(2024, 6, 16)
