"""Predicates over Records, combined with AND."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from logsift.levels import severity
from logsift.records import Record

Predicate = Callable[[Record], bool]


def min_level(name: str) -> Predicate:
    threshold = severity(name)
    return lambda r: r.levelno >= threshold


def logger_prefixes(names: Sequence[str]) -> Predicate:
    """Exact logger names or their descendants: 'db' matches 'db' and 'db.pool', not 'dbx'."""
    wanted = tuple(n.strip(".") for n in names)
    return lambda r: any(r.logger == n or r.logger.startswith(n + ".") for n in wanted)


def grep(pattern: str, ignore_case: bool = False) -> Predicate:
    try:
        regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise ValueError(f"invalid --grep pattern {pattern!r}: {exc}") from None
    return lambda r: regex.search(r.searchable()) is not None


def time_window(since: str | None, until: str | None) -> Predicate:
    """since is inclusive, until exclusive."""

    def check(r: Record) -> bool:
        if since is not None and r.timestamp < since:
            return False
        if until is not None and r.timestamp >= until:
            return False
        return True

    return check


def build_filter(
    level: str | None = None,
    loggers: Sequence[str] = (),
    pattern: str | None = None,
    ignore_case: bool = False,
    since: str | None = None,
    until: str | None = None,
) -> Predicate:
    checks: list[Predicate] = []
    if level:
        checks.append(min_level(level))
    if loggers:
        checks.append(logger_prefixes(loggers))
    if pattern:
        checks.append(grep(pattern, ignore_case))
    if since is not None or until is not None:
        checks.append(time_window(since, until))
    return lambda r: all(check(r) for check in checks)
