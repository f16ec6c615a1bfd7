from datetime import timedelta

import pytest

from spanfmt import DurationError, format_iso, parse_iso


def test_parse_full_form():
    assert parse_iso("P1DT2H30M15S") == timedelta(days=1, hours=2, minutes=30, seconds=15)


def test_parse_weeks_fractions_and_sign():
    assert parse_iso("P2W") == timedelta(weeks=2)
    assert parse_iso("PT0,5S") == timedelta(milliseconds=500)
    assert parse_iso("-PT5M") == timedelta(minutes=-5)


def test_years_and_months_are_refused():
    with pytest.raises(DurationError, match="no fixed length"):
        parse_iso("P1Y2M")


@pytest.mark.parametrize("bad", ["P", "PT", "1H", "PT1H30", "P1DT"])
def test_malformed_durations(bad):
    with pytest.raises(DurationError, match="not an ISO 8601 duration"):
        parse_iso(bad)


def test_format_canonical():
    assert format_iso(timedelta(days=1, hours=2, minutes=30)) == "P1DT2H30M"
    assert format_iso(timedelta(seconds=90.25)) == "PT1M30.25S"
    assert format_iso(timedelta(0)) == "PT0S"
    assert format_iso(timedelta(weeks=3), weeks=True) == "P3W"


def test_round_trip_positive():
    for td in (timedelta(hours=49, seconds=1), timedelta(microseconds=1), timedelta(days=400)):
        assert parse_iso(format_iso(td)) == td
