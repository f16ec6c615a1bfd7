"""logsift: filter structured log records."""

from logsift.cli import main
from logsift.filters import build_filter
from logsift.parser import parse_lines
from logsift.records import Record

__all__ = ["Record", "build_filter", "main", "parse_lines"]
