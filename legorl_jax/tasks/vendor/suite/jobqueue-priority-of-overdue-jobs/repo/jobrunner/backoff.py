"""Backoff: how long to wait before retry number n (n = 1 for the first retry)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    base: float = 1.0
    factor: float = 2.0
    max_delay: float = 3600.0

    def __post_init__(self) -> None:
        if not self.base > 0 or not self.factor >= 1 or not self.max_delay >= self.base:
            raise ValueError(f"invalid backoff {self!r}: need base > 0, factor >= 1, max_delay >= base")

    def delay(self, retry: int) -> float:
        if isinstance(retry, bool) or not isinstance(retry, int) or retry < 1:
            raise ValueError(f"retry number must be an int >= 1, got {retry!r}")
        return min(self.base * self.factor ** (retry - 1), self.max_delay)
