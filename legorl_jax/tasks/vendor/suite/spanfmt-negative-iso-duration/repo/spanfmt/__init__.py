"""spanfmt: timedelta <-> ISO 8601, shorthand and clock text."""

from spanfmt.clock import format_clock, parse_clock
from spanfmt.errors import DurationError
from spanfmt.human import format_human, parse_human
from spanfmt.iso import format_iso, parse_iso

__all__ = ["DurationError", "format_clock", "format_human", "format_iso", "parse_clock", "parse_human", "parse_iso"]
