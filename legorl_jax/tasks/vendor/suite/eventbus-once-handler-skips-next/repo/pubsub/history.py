"""History: the most recent events of a bus, for late subscribers and debugging."""

from __future__ import annotations

from collections import deque

from pubsub.event import Event
from pubsub.topics import matches


class History:
    def __init__(self, size: int = 100) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"history size must be a non-negative int, got {size!r}")
        self._events: deque[Event] = deque(maxlen=size)

    def record(self, event: Event) -> None:
        self._events.append(event)

    def matching(self, pattern: str) -> list[Event]:
        return [e for e in self._events if matches(pattern, e.topic)]

    def __len__(self) -> int:
        return len(self._events)

    def clear(self) -> None:
        self._events.clear()
