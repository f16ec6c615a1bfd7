from datetime import datetime, timedelta, timezone

import pytest

from stamp3339 import format_offset, format_timestamp, from_epoch, parse, parse_offset, to_epoch, to_offset


def test_format_round_trips_positive_offset():
    text = "2024-03-10T07:15:00.250000+05:30"
    assert format_timestamp(parse(text)) == text


def test_format_precision_and_z():
    dt = datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=timezone.utc)
    assert format_timestamp(dt, precision=3) == "2024-01-01T00:00:00.123Z"
    assert format_timestamp(dt, precision=0, utc_as_z=False) == "2024-01-01T00:00:00+00:00"


def test_naive_datetime_is_refused():
    with pytest.raises(ValueError, match="naive"):
        format_timestamp(datetime(2024, 1, 1))


def test_offsets_parse_and_format():
    assert parse_offset("+05:45") == 345
    assert parse_offset("-06:00") == -360
    assert format_offset(-360) == "-06:00"
    assert format_offset(0, utc_as_z=True) == "Z"


def test_to_offset_keeps_the_instant():
    dt = parse("2024-03-10T07:15:00+05:30")
    moved = to_offset(dt, "-04:00")
    assert moved == dt
    assert format_timestamp(moved) == "2024-03-09T21:45:00-04:00"


def test_epoch_round_trip():
    dt = parse("2001-09-09T01:46:40.5Z")
    assert to_epoch(dt) == 1_000_000_000.5
    assert from_epoch(1_000_000_000.5) == dt
    assert from_epoch(0, "+01:00").utcoffset() == timedelta(hours=1)
