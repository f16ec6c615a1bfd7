from datetime import timedelta

import pytest

from spanfmt import DurationError, format_clock, format_human, parse_clock, parse_human


def test_parse_shorthand_variants():
    assert parse_human("1h 30m") == timedelta(hours=1, minutes=30)
    assert parse_human("2d4h") == timedelta(days=2, hours=4)
    assert parse_human("1.5 hours") == timedelta(minutes=90)
    assert parse_human("-90s") == timedelta(seconds=-90)


def test_shorthand_errors():
    with pytest.raises(DurationError, match="unknown unit"):
        parse_human("3 fortnights")
    with pytest.raises(DurationError, match="given twice"):
        parse_human("1h 2h")


def test_format_shorthand():
    assert format_human(timedelta(days=9, hours=3, seconds=4.5)) == "1w 2d 3h 4.5s"
    assert format_human(timedelta(minutes=-90)) == "-1h 30m"
    assert format_human(timedelta(hours=25, minutes=5), max_units=1) == "1d"


def test_clock_round_trip_and_sign():
    assert format_clock(timedelta(hours=100, seconds=5.5)) == "100:00:05.5"
    assert format_clock(timedelta(seconds=-5)) == "-00:00:05"
    assert parse_clock("-1:02:03") == -timedelta(hours=1, minutes=2, seconds=3)
    assert parse_clock("05:30") == timedelta(minutes=5, seconds=30)


def test_clock_rejects_sixty_seconds():
    with pytest.raises(DurationError, match="below 60"):
        parse_clock("00:00:60")
