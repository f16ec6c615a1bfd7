"""Clocks: something with a `now()` returning seconds as a float, monotonic."""

from __future__ import annotations

import time


class MonotonicClock:
    def now(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that only moves when told to, for tests and simulations."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock cannot go backwards, got advance({seconds!r})")
        self._now += seconds

    def set(self, when: float) -> None:
        if when < self._now:
            raise ValueError(f"a clock cannot go backwards: now={self._now!r}, set({when!r})")
        self._now = float(when)
