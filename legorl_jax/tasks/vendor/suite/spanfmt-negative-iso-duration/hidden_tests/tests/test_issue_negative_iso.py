from datetime import timedelta

import pytest

from spanfmt import format_iso, parse_iso


def test_negative_minutes_format_with_leading_sign():
    assert format_iso(timedelta(minutes=-5)) == "-PT5M"


def test_negative_multi_day_duration():
    assert format_iso(-timedelta(days=2, hours=3, seconds=1.5)) == "-P2DT3H1.5S"


def test_negative_weeks_option():
    assert format_iso(timedelta(weeks=-2), weeks=True) == "-P2W"


@pytest.mark.parametrize(
    "td",
    [timedelta(microseconds=-1), timedelta(seconds=-86400), timedelta(hours=-49, minutes=-59), timedelta(days=-400)],
    ids=["micro", "one-day", "two-days", "long"],
)
def test_negative_durations_round_trip(td):
    assert parse_iso(format_iso(td)) == td


def test_positive_output_unchanged():
    assert format_iso(timedelta(days=1, hours=2, minutes=30)) == "P1DT2H30M"
