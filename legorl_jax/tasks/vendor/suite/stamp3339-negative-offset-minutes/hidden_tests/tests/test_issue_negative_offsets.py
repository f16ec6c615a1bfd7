from datetime import datetime, timedelta, timezone

import pytest

from stamp3339 import format_timestamp, parse, parse_offset, to_offset, to_utc


def test_negative_offset_with_minutes_is_parsed_whole():
    assert parse_offset("-03:30") == -210
    assert parse_offset("-0930") == -570
    assert parse_offset("-00:30") == -30


def test_newfoundland_timestamp_converts_to_utc():
    dt = parse("2024-07-01T09:00:00-02:30")
    assert dt.utcoffset() == timedelta(hours=-2, minutes=-30)
    assert to_utc(dt) == datetime(2024, 7, 1, 11, 30, tzinfo=timezone.utc)


@pytest.mark.parametrize("text", ["2024-07-01T09:00:00-03:30", "1999-12-31T23:59:59.500000-09:30", "2024-02-29T00:00:00-00:45"])
def test_negative_offsets_round_trip_through_format(text):
    assert format_timestamp(parse(text)) == text


def test_converting_to_negative_offset_text():
    dt = parse("2024-07-01T12:00:00Z")
    assert format_timestamp(to_offset(dt, "-03:30")) == "2024-07-01T08:30:00-03:30"


def test_positive_and_whole_hour_offsets_unchanged():
    assert parse_offset("+09:30") == 570
    assert parse_offset("-05:00") == -300
