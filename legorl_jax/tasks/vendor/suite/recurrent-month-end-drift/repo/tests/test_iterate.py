from datetime import date

import pytest

from recurrent import Rule, RuleError, between, describe, occurrences, parse_rule


def test_daily_with_interval_and_count():
    got = list(occurrences(Rule("daily", interval=3, count=3), date(2024, 2, 27)))
    assert got == [date(2024, 2, 27), date(2024, 3, 1), date(2024, 3, 4)]


def test_weekly_on_chosen_days_until_inclusive():
    rule = parse_rule("FREQ=WEEKLY;BYDAY=MO,WE;UNTIL=20240610")
    assert list(occurrences(rule, date(2024, 5, 29))) == [
        date(2024, 5, 29), date(2024, 6, 3), date(2024, 6, 5), date(2024, 6, 10),
    ]


def test_monthly_mid_month():
    got = list(occurrences(Rule("monthly", count=4), date(2023, 11, 15)))
    assert got == [date(2023, 11, 15), date(2023, 12, 15), date(2024, 1, 15), date(2024, 2, 15)]


def test_monthly_from_31st_clamps_february():
    assert list(occurrences(Rule("monthly", count=2), date(2024, 1, 31))) == [date(2024, 1, 31), date(2024, 2, 29)]


def test_quarterly_via_interval():
    got = list(occurrences(Rule("monthly", interval=3, count=3), date(2024, 1, 10)))
    assert got == [date(2024, 1, 10), date(2024, 4, 10), date(2024, 7, 10)]


def test_between_window():
    rule = Rule("weekly")
    assert between(rule, date(2024, 1, 1), date(2024, 1, 10), date(2024, 1, 22)) == [date(2024, 1, 15), date(2024, 1, 22)]


def test_parse_errors():
    with pytest.raises(RuleError, match="FREQ is required"):
        parse_rule("COUNT=3")
    with pytest.raises(RuleError, match="not both"):
        parse_rule("FREQ=DAILY;COUNT=3;UNTIL=20240101")
    with pytest.raises(RuleError, match="unknown BYDAY"):
        parse_rule("FREQ=WEEKLY;BYDAY=XX")


def test_describe():
    assert describe(Rule("weekly", interval=2, weekdays=(2, 0))) == "every 2 weeks on Monday and Wednesday"
    assert describe(Rule("monthly", count=1)) == "every month, once"
