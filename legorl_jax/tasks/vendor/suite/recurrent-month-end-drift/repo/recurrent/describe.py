"""Plain-English descriptions of rules."""

from __future__ import annotations

from recurrent.rule import Rule

_UNITS = {"daily": "day", "weekly": "week", "monthly": "month", "yearly": "year"}
_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _join(words: list[str]) -> str:
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def describe(rule: Rule) -> str:
    unit = _UNITS[rule.freq]
    text = f"every {unit}" if rule.interval == 1 else f"every {rule.interval} {unit}s"
    if rule.weekdays:
        text += " on " + _join([_NAMES[d] for d in rule.weekdays])
    if rule.count is not None:
        text += ", once" if rule.count == 1 else f", {rule.count} times"
    if rule.until is not None:
        text += f", until {rule.until.isoformat()}"
    return text
