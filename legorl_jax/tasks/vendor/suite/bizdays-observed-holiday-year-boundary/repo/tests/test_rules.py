from datetime import date

import pytest

from bizdays import EasterOffset, FixedDate, NthWeekday
from bizdays.observance import NEAREST_WEEKDAY, NEXT_MONDAY, observed
from bizdays.rules import easter_sunday


def test_easter_dates():
    assert [easter_sunday(y) for y in (2019, 2024, 2025)] == [date(2019, 4, 21), date(2024, 3, 31), date(2025, 4, 20)]


def test_nth_and_last_weekday():
    assert NthWeekday("Thanksgiving", 11, 3, 4).actual(2024) == date(2024, 11, 28)
    assert NthWeekday("Memorial", 5, 0, -1).actual(2024) == date(2024, 5, 27)
    assert NthWeekday("Fifth Monday", 2, 0, 5).actual(2023) is None


def test_leap_day_rule_skips_common_years():
    assert FixedDate("Leap", 2, 29).actual(2023) is None
    assert FixedDate("Leap", 2, 29).actual(2024) == date(2024, 2, 29)


def test_observance_policies():
    saturday, sunday = date(2021, 12, 25), date(2022, 12, 25)
    assert observed(saturday, NEAREST_WEEKDAY) == date(2021, 12, 24)
    assert observed(sunday, NEAREST_WEEKDAY) == date(2022, 12, 26)
    assert observed(saturday, NEXT_MONDAY) == date(2021, 12, 27)


def test_invalid_rules():
    with pytest.raises(ValueError, match="observance"):
        FixedDate("X", 1, 1, "sometimes")
    with pytest.raises(ValueError, match="n must be"):
        NthWeekday("X", 1, 0, 6)
    assert EasterOffset("Good Friday", -2).actual(2024) == date(2024, 3, 29)
