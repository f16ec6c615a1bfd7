"""HolidayCalendar: the set of rules, expanded year by year into observed holiday dates."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date

from bizdays.observance import observed
from bizdays.rules import Rule


class HolidayCalendar:
    def __init__(self, name: str, rules: Iterable[Rule]) -> None:
        self.name = name
        self.rules = tuple(rules)
        names = [r.name for r in self.rules]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"calendar {name!r} has duplicate rule names: {dupes}")

    def holidays_for_year(self, year: int) -> dict[date, str]:
        """Observed holiday dates in `year`, mapped to their names ('... (observed)' when moved)."""
        out: dict[date, str] = {}
        for rule in self.rules:
            actual = rule.actual(year)
            if actual is None:
                continue
            day = observed(actual, rule.observance)
            label = rule.name if day == actual else f"{rule.name} (observed)"
            # Two holidays on one day keep both names.
            out[day] = f"{out[day]}; {label}" if day in out else label
        return dict(sorted(out.items()))

    def extend(self, name: str, extra: Iterable[Rule]) -> "HolidayCalendar":
        return HolidayCalendar(name, self.rules + tuple(extra))
