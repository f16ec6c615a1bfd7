"""Turning log text into Records. Indented lines continue the previous record; others that do not
match the format are reported as skipped rather than failing the whole run."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from logsift.levels import canonical_level, severity
from logsift.records import Record

TIMESTAMP = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:Z|[+-]\d{2}:\d{2})"
TIMESTAMP_RE = re.compile(TIMESTAMP)
_LINE = re.compile(rf"^(?P<ts>{TIMESTAMP})\s+(?P<level>[A-Za-z]+)\s+\[(?P<logger>[^\]]+)\]\s?(?P<message>.*)$")


class ParseStats:
    def __init__(self) -> None:
        self.records = 0
        self.skipped: list[tuple[str, int]] = []


def parse_lines(lines: Iterable[str], source: str = "-", stats: ParseStats | None = None) -> Iterator[Record]:
    stats = stats if stats is not None else ParseStats()
    pending: Record | None = None
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\n")
        if not line.strip():
            continue
        if line[0] in " \t" and pending is not None:
            pending.extra.append(line)
            continue
        m = _LINE.match(line)
        if m is None:
            stats.skipped.append((source, number))
            continue
        try:
            level = canonical_level(m["level"])
        except ValueError:
            stats.skipped.append((source, number))
            continue
        if pending is not None:
            yield pending
        pending = Record(m["ts"], level, severity(level), m["logger"], m["message"], source, number)
        stats.records += 1
    if pending is not None:
        yield pending
