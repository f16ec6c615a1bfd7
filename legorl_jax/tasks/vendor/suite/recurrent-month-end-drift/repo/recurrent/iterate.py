"""Expanding a rule from a start date into the dates it occurs on."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, timedelta

from recurrent.monthmath import add_months
from recurrent.rule import Rule

_SAFETY_LIMIT = 100_000  # an unbounded rule is fine lazily, but between() must terminate


def _candidates(rule: Rule, start: date) -> Iterator[date]:
    if rule.freq == "daily":
        step = timedelta(days=rule.interval)
        current = start
        while True:
            yield current
            current += step
    elif rule.freq == "weekly":
        weekdays = rule.weekdays or (start.weekday(),)
        week_start = start - timedelta(days=start.weekday())
        while True:
            for wd in weekdays:
                day = week_start + timedelta(days=wd)
                if day >= start:
                    yield day
            week_start += timedelta(weeks=rule.interval)
    else:
        months = rule.interval * (12 if rule.freq == "yearly" else 1)
        current = start
        while True:
            yield current
            current = add_months(current, months)


def occurrences(rule: Rule, start: date) -> Iterator[date]:
    """Dates in order, starting with start itself (or the first chosen weekday on or after it)."""
    if not isinstance(start, date):
        raise TypeError(f"start must be a date, got {type(start).__name__}")
    emitted = 0
    for day in _candidates(rule, start):
        if rule.until is not None and day > rule.until:
            return
        yield day
        emitted += 1
        if rule.count is not None and emitted >= rule.count:
            return


def between(rule: Rule, start: date, after: date, before: date) -> list[date]:
    """Occurrences d with after <= d <= before."""
    if after > before:
        raise ValueError(f"after ({after}) is later than before ({before})")
    out: list[date] = []
    for n, day in enumerate(occurrences(rule, start)):
        if day > before or n > _SAFETY_LIMIT:
            break
        if day >= after:
            out.append(day)
    return out
