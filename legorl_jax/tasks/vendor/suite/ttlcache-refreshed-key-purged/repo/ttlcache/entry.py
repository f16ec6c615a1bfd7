"""Entry: a cached value and the time it stops being valid."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Entry:
    value: Any
    ttl: float | None  # seconds the entry lives after it is set (or, when sliding, last read)
    expires_at: float | None  # None: never expires

    def is_expired(self, now: float) -> bool:
        # An entry set with ttl=10 at t=0 is gone at t=10, not only after it.
        return self.expires_at is not None and now >= self.expires_at
