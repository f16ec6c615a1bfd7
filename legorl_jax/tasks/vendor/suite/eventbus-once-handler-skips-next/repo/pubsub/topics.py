"""Topic names and patterns.

A topic is a dot-separated name ("order.created"). A pattern may use "*" for exactly one segment and
"**" for any number of segments (including zero): "order.*" matches "order.created" but not
"order.item.added"; "order.**" matches both, and "order" itself.
"""

from __future__ import annotations

from functools import lru_cache


def _segments(name: object, what: str) -> tuple[str, ...]:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} must be a non-empty string, got {name!r}")
    parts = tuple(name.split("."))
    if any(not p for p in parts):
        raise ValueError(f"{what} {name!r} has an empty segment")
    return parts


def validate_topic(topic: str) -> tuple[str, ...]:
    parts = _segments(topic, "topic")
    if any(p in ("*", "**") for p in parts):
        raise ValueError(f"topic {topic!r} must not contain wildcards; only patterns may")
    return parts


def validate_pattern(pattern: str) -> tuple[str, ...]:
    parts = _segments(pattern, "pattern")
    for p in parts:
        if ("*" in p) and p not in ("*", "**"):
            raise ValueError(f"pattern {pattern!r}: wildcards must be whole segments, got {p!r}")
    return parts


@lru_cache(maxsize=1024)
def matches(pattern: str, topic: str) -> bool:
    return _match(validate_pattern(pattern), validate_topic(topic))


def _match(pattern: tuple[str, ...], topic: tuple[str, ...]) -> bool:
    if not pattern:
        return not topic
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_match(rest, topic[i:]) for i in range(len(topic) + 1))
    if not topic:
        return False
    if head == "*" or head == topic[0]:
        return _match(rest, topic[1:])
    return False
