from datetime import date

from recurrent import Rule, between, occurrences, parse_rule


def test_monthly_from_31st_returns_to_31st():
    got = list(occurrences(parse_rule("FREQ=MONTHLY;COUNT=6"), date(2024, 1, 31)))
    assert got == [
        date(2024, 1, 31), date(2024, 2, 29), date(2024, 3, 31),
        date(2024, 4, 30), date(2024, 5, 31), date(2024, 6, 30),
    ]


def test_monthly_from_30th_across_february():
    got = list(occurrences(Rule("monthly", count=4), date(2023, 12, 30)))
    assert got == [date(2023, 12, 30), date(2024, 1, 30), date(2024, 2, 29), date(2024, 3, 30)]


def test_bimonthly_with_until():
    rule = parse_rule("FREQ=MONTHLY;INTERVAL=2;UNTIL=20241231")
    assert list(occurrences(rule, date(2023, 12, 31))) == [
        date(2023, 12, 31), date(2024, 2, 29), date(2024, 4, 30),
        date(2024, 6, 30), date(2024, 8, 31), date(2024, 10, 31), date(2024, 12, 31),
    ]


def test_yearly_leap_day_returns_in_leap_years():
    got = list(occurrences(Rule("yearly", count=5), date(2024, 2, 29)))
    assert got == [date(2024, 2, 29), date(2025, 2, 28), date(2026, 2, 28), date(2027, 2, 28), date(2028, 2, 29)]


def test_between_sees_anchored_dates():
    rule = Rule("monthly")
    assert between(rule, date(2024, 1, 31), date(2024, 7, 1), date(2024, 8, 31)) == [date(2024, 7, 31), date(2024, 8, 31)]


def test_mid_month_rules_unchanged():
    assert list(occurrences(Rule("monthly", count=3), date(2024, 1, 15)))[-1] == date(2024, 3, 15)
