"""csvlet: read and write CSV text with configurable dialects."""

from csvlet.dialect import Dialect, DialectError
from csvlet.reader import CSVSyntaxError, read_rows
from csvlet.records import read_records, write_records
from csvlet.writer import format_row, write_rows

__all__ = [
    "CSVSyntaxError",
    "Dialect",
    "DialectError",
    "format_row",
    "read_records",
    "read_rows",
    "write_records",
    "write_rows",
]
