"""stamp3339: RFC 3339 timestamps in and out of aware datetimes."""

from stamp3339.convert import from_epoch, to_epoch, to_offset, to_utc
from stamp3339.format import format_timestamp
from stamp3339.offsets import OffsetError, format_offset, offset_tzinfo, parse_offset
from stamp3339.parse import TimestampError, parse

__all__ = [
    "OffsetError",
    "TimestampError",
    "format_offset",
    "format_timestamp",
    "from_epoch",
    "offset_tzinfo",
    "parse",
    "parse_offset",
    "to_epoch",
    "to_offset",
    "to_utc",
]
