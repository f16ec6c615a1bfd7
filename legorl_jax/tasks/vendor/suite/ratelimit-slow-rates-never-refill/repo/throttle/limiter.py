"""RateLimiter: one token bucket per key (user, IP, API token), created on first use.

Buckets that have refilled completely carry no information, so `prune()` drops them; callers run it
from time to time to keep memory proportional to the number of recently active keys.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import wraps

from throttle.bucket import TokenBucket
from throttle.clock import MonotonicClock
from throttle.rate import Rate, parse_rate


@dataclass(frozen=True)
class Decision:
    allowed: bool
    remaining: int
    retry_after: float  # seconds; 0 when allowed


class RateLimited(Exception):
    def __init__(self, key: Hashable, retry_after: float) -> None:
        super().__init__(f"rate limit exceeded for {key!r}; retry after {retry_after:.3g}s")
        self.key = key
        self.retry_after = retry_after


class RateLimiter:
    def __init__(self, rate: str | Rate, burst: int | None = None, clock=None) -> None:
        self.rate = parse_rate(rate)
        self.burst = self.rate.limit if burst is None else burst
        if isinstance(self.burst, bool) or not isinstance(self.burst, int) or self.burst < 1:
            raise ValueError(f"burst must be a positive int, got {burst!r}")
        self._clock = clock if clock is not None else MonotonicClock()
        self._buckets: dict[Hashable, TokenBucket] = {}

    def _bucket(self, key: Hashable) -> TokenBucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(self.burst, self.rate.per_second, self._clock)
            self._buckets[key] = bucket
        return bucket

    def hit(self, key: Hashable, cost: int = 1) -> Decision:
        bucket = self._bucket(key)
        if bucket.try_acquire(cost):
            return Decision(True, math.floor(bucket.tokens), 0.0)
        return Decision(False, math.floor(bucket.tokens), bucket.wait_time(cost))

    def peek(self, key: Hashable) -> int:
        """Requests `key` could make right now, without spending any."""
        bucket = self._buckets.get(key)
        return self.burst if bucket is None else math.floor(bucket.tokens)

    def reset(self, key: Hashable) -> None:
        self._buckets.pop(key, None)

    def prune(self) -> int:
        now = self._clock.now()
        idle = [key for key, bucket in self._buckets.items() if bucket.idle_full_at() <= now]
        for key in idle:
            del self._buckets[key]
        return len(idle)

    def __len__(self) -> int:
        return len(self._buckets)

    def limit(self, key_func: Callable[..., Hashable]) -> Callable:
        """Decorator: raises RateLimited when the call's key is over its rate."""
        def decorate(func: Callable) -> Callable:
            @wraps(func)
            def wrapper(*args, **kwargs):
                key = key_func(*args, **kwargs)
                decision = self.hit(key)
                if not decision.allowed:
                    raise RateLimited(key, decision.retry_after)
                return func(*args, **kwargs)
            return wrapper
        return decorate
