"""Observance: the day a weekend holiday is taken instead."""

from __future__ import annotations

from datetime import date, timedelta

NONE = "none"
NEAREST_WEEKDAY = "nearest_weekday"  # Saturday -> Friday, Sunday -> Monday (US federal)
NEXT_MONDAY = "next_monday"  # Saturday or Sunday -> Monday (UK substitute days)
POLICIES = (NONE, NEAREST_WEEKDAY, NEXT_MONDAY)


def observed(day: date, policy: str) -> date:
    if policy not in POLICIES:
        raise ValueError(f"observance policy must be one of {POLICIES}, got {policy!r}")
    wd = day.weekday()
    if policy == NONE or wd < 5:
        return day
    if policy == NEAREST_WEEKDAY:
        return day - timedelta(days=1) if wd == 5 else day + timedelta(days=1)
    return day + timedelta(days=7 - wd)
