"""Level names, their aliases and their numeric severities."""

from __future__ import annotations

SEVERITY = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}
ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL", "ERR": "ERROR", "INFORMATION": "INFO"}


def canonical_level(name: str) -> str:
    upper = name.strip().upper()
    upper = ALIASES.get(upper, upper)
    if upper not in SEVERITY:
        raise ValueError(f"unknown level {name!r}; use one of {', '.join(n.lower() for n in SEVERITY)}")
    return upper


def severity(name: str) -> int:
    return SEVERITY[canonical_level(name)]
