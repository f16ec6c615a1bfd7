from datetime import datetime, timedelta, timezone

import pytest

from stamp3339 import TimestampError, parse


def test_utc_z_suffix():
    assert parse("2024-03-10T07:15:00Z") == datetime(2024, 3, 10, 7, 15, tzinfo=timezone.utc)


def test_positive_offset_with_minutes():
    dt = parse("2024-03-10T07:15:00+05:30")
    assert dt.utcoffset() == timedelta(hours=5, minutes=30)


def test_negative_whole_hour_offset():
    dt = parse("2024-01-02T03:04:05-08:00")
    assert dt.utcoffset() == timedelta(hours=-8)
    assert dt.astimezone(timezone.utc).hour == 11


def test_compact_offset_and_lowercase_separators():
    assert parse("2024-01-02t03:04:05+0100").utcoffset() == timedelta(hours=1)
    assert parse("2024-01-02 03:04:05z").tzinfo == timezone.utc


def test_fraction_is_truncated_to_microseconds():
    assert parse("2024-01-02T03:04:05.123456789Z").microsecond == 123456


def test_bad_inputs_raise_with_the_text():
    for bad in ("2024-01-02T03:04:05", "2024-13-02T03:04:05Z", "2024-01-02T03:04:60Z", "2024-01-02T03:04:05+24:00"):
        with pytest.raises(TimestampError, match="2024-"):
            parse(bad)
