"""TokenBucket: `capacity` tokens, refilled continuously at `rate` tokens per second.

Tokens are computed lazily from the time of the last update, so an idle bucket costs nothing.
"""

from __future__ import annotations

import math


class TokenBucket:
    def __init__(self, capacity: float, rate: float, clock, tokens: float | None = None) -> None:
        if capacity <= 0:
            raise ValueError(f"bucket capacity must be positive, got {capacity!r}")
        if rate < 0:
            raise ValueError(f"refill rate must be non-negative, got {rate!r}")
        self.capacity = float(capacity)
        self.rate = float(rate)
        self._clock = clock
        self._tokens = self.capacity if tokens is None else float(tokens)
        self._updated = clock.now()

    def _refill(self) -> None:
        now = self._clock.now()
        elapsed = now - self._updated
        if elapsed > 0:
            self._tokens = min(self.capacity, self._tokens + elapsed * self.rate)
            self._updated = now

    @property
    def tokens(self) -> float:
        self._refill()
        return self._tokens

    def try_acquire(self, n: float = 1) -> bool:
        if n <= 0:
            raise ValueError(f"must acquire a positive number of tokens, got {n!r}")
        self._refill()
        if self._tokens >= n:
            self._tokens -= n
            return True
        return False

    def wait_time(self, n: float = 1) -> float:
        """Seconds until `n` tokens are available (0 if they are now; inf if they never will be)."""
        if n > self.capacity:
            return math.inf
        self._refill()
        missing = n - self._tokens
        if missing <= 0:
            return 0.0
        if self.rate == 0:
            return math.inf
        return missing / self.rate

    def idle_full_at(self) -> float:
        """The clock time at which this bucket is full again if nobody uses it."""
        if self.rate == 0:
            return math.inf
        return self._updated + (self.capacity - self._tokens) / self.rate
