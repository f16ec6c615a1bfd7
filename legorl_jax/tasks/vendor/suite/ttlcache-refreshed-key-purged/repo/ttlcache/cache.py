"""TTLCache: LRUStore for values and recency, ExpiryQueue for deadlines, Entry per value.

Reads check the entry's own `expires_at`, so an expired value is never returned. Bulk removal of
expired entries (purge) walks the ExpiryQueue instead of scanning the whole store.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from ttlcache.clock import MonotonicClock
from ttlcache.entry import Entry
from ttlcache.expiry import ExpiryQueue
from ttlcache.lru import LRUStore
from ttlcache.stats import CacheStats

_DEFAULT = object()


def _check_ttl(ttl: object) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
        raise ValueError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
    return float(ttl)


class TTLCache:
    def __init__(self, maxsize: int = 128, ttl: float | None = None, clock=None, sliding: bool = False) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"maxsize must be a positive int, got {maxsize!r}")
        self.maxsize = maxsize
        self.ttl = _check_ttl(ttl)
        self.sliding = sliding
        self._clock = clock if clock is not None else MonotonicClock()
        self._store = LRUStore()
        self._expiry = ExpiryQueue()
        self.stats = CacheStats()

    def _deadline(self, ttl: float | None) -> float | None:
        return None if ttl is None else self._clock.now() + ttl

    def set(self, key: Hashable, value: Any, ttl: float | None | object = _DEFAULT) -> None:
        ttl = self.ttl if ttl is _DEFAULT else _check_ttl(ttl)
        if self._store.peek(key) is None and len(self._store) >= self.maxsize:
            self.purge()
            if len(self._store) >= self.maxsize:
                self._store.pop_oldest()
                self.stats.evictions += 1
        entry = Entry(value, ttl, self._deadline(ttl))
        self._store.put(key, entry)
        if entry.expires_at is not None:
            self._expiry.schedule(key, entry.expires_at)

    def get(self, key: Hashable, default: Any = None) -> Any:
        entry = self._store.get(key)
        now = self._clock.now()
        if entry is None:
            self.stats.misses += 1
            return default
        if entry.is_expired(now):
            self._store.pop(key)
            self.stats.expirations += 1
            self.stats.misses += 1
            return default
        if self.sliding and entry.ttl is not None:
            entry.expires_at = now + entry.ttl
            self._expiry.schedule(key, entry.expires_at)
        self.stats.hits += 1
        return entry.value

    def get_or_set(self, key: Hashable, factory: Callable[[], Any], ttl: float | None | object = _DEFAULT) -> Any:
        marker = object()
        value = self.get(key, marker)
        if value is marker:
            value = factory()
            self.set(key, value, ttl)
        return value

    def delete(self, key: Hashable) -> bool:
        return self._store.pop(key) is not None

    def __contains__(self, key: object) -> bool:
        entry = self._store.peek(key)
        return entry is not None and not entry.is_expired(self._clock.now())

    def ttl_remaining(self, key: Hashable) -> float | None:
        """Seconds left for a live key (None if it never expires); KeyError if absent or expired."""
        entry = self._store.peek(key)
        now = self._clock.now()
        if entry is None or entry.is_expired(now):
            raise KeyError(key)
        return None if entry.expires_at is None else entry.expires_at - now

    def purge(self) -> int:
        """Drops expired entries; returns how many."""
        removed = 0
        for key in self._expiry.pop_due(self._clock.now()):
            if self._store.pop(key) is not None:
                removed += 1
        self.stats.expirations += removed
        return removed

    def __len__(self) -> int:
        self.purge()
        return len(self._store)

    def keys(self) -> list[Hashable]:
        """Live keys, least recently used first."""
        self.purge()
        return list(self._store)

    def clear(self) -> None:
        self._store.clear()
        self._expiry.clear()
