"""Rules: what repeats, how often, and until when; parsed from a small RRULE-like syntax."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

FREQUENCIES = ("daily", "weekly", "monthly", "yearly")
WEEKDAY_CODES = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")


class RuleError(ValueError):
    pass


@dataclass(frozen=True)
class Rule:
    freq: str
    interval: int = 1
    count: int | None = None
    until: date | None = None
    weekdays: tuple[int, ...] = ()  # weekly only; 0 = Monday

    def __post_init__(self) -> None:
        if self.freq not in FREQUENCIES:
            raise RuleError(f"freq must be one of {FREQUENCIES}, got {self.freq!r}")
        if not isinstance(self.interval, int) or self.interval < 1:
            raise RuleError(f"interval must be a positive int, got {self.interval!r}")
        if self.count is not None and (not isinstance(self.count, int) or self.count < 1):
            raise RuleError(f"count must be a positive int, got {self.count!r}")
        if self.count is not None and self.until is not None:
            raise RuleError("give count or until, not both")
        if self.weekdays and self.freq != "weekly":
            raise RuleError(f"weekdays only apply to weekly rules, not {self.freq!r}")
        if any(not 0 <= d <= 6 for d in self.weekdays):
            raise RuleError(f"weekdays must be 0..6, got {self.weekdays!r}")
        object.__setattr__(self, "weekdays", tuple(sorted(set(self.weekdays))))


def parse_rule(text: str) -> Rule:
    """'FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,WE;UNTIL=20240630' -> Rule."""
    fields: dict[str, str] = {}
    for part in filter(None, text.strip().split(";")):
        key, sep, value = part.partition("=")
        if not sep or not value:
            raise RuleError(f"expected KEY=VALUE, got {part!r}")
        key = key.strip().upper()
        if key in fields:
            raise RuleError(f"{key} given twice")
        fields[key] = value.strip()
    unknown = sorted(set(fields) - {"FREQ", "INTERVAL", "COUNT", "UNTIL", "BYDAY"})
    if unknown:
        raise RuleError(f"unsupported rule parts: {unknown}")
    if "FREQ" not in fields:
        raise RuleError("FREQ is required")
    try:
        interval = int(fields.get("INTERVAL", "1"))
        count = int(fields["COUNT"]) if "COUNT" in fields else None
    except ValueError as exc:
        raise RuleError(f"INTERVAL and COUNT must be integers: {exc}") from None
    until = None
    if "UNTIL" in fields:
        raw = fields["UNTIL"][:8]
        try:
            until = date(int(raw[:4]), int(raw[4:6]), int(raw[6:8]))
        except ValueError:
            raise RuleError(f"UNTIL must be YYYYMMDD, got {fields['UNTIL']!r}") from None
    weekdays: tuple[int, ...] = ()
    if "BYDAY" in fields:
        codes = [c.strip().upper() for c in fields["BYDAY"].split(",")]
        bad = [c for c in codes if c not in WEEKDAY_CODES]
        if bad:
            raise RuleError(f"unknown BYDAY codes {bad}; use {WEEKDAY_CODES}")
        weekdays = tuple(WEEKDAY_CODES.index(c) for c in codes)
    return Rule(fields["FREQ"].lower(), interval, count, until, weekdays)
