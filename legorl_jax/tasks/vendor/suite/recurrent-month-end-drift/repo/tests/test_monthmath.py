from datetime import date

from recurrent import add_months, days_in_month, is_leap_year


def test_leap_years():
    assert [is_leap_year(y) for y in (1900, 2000, 2023, 2024)] == [False, True, False, True]


def test_month_lengths():
    assert days_in_month(2024, 2) == 29
    assert days_in_month(2023, 2) == 28
    assert days_in_month(2023, 4) == 30


def test_add_months_clamps_and_crosses_years():
    assert add_months(date(2024, 1, 31), 1) == date(2024, 2, 29)
    assert add_months(date(2023, 11, 15), 3) == date(2024, 2, 15)
    assert add_months(date(2024, 3, 31), -1) == date(2024, 2, 29)
