"""A size-bounded LRU cache with per-entry time-to-live."""

from ttlcache.cache import TTLCache
from ttlcache.clock import ManualClock, MonotonicClock
from ttlcache.stats import CacheStats

__all__ = ["CacheStats", "ManualClock", "MonotonicClock", "TTLCache"]
__version__ = "0.9.2"
