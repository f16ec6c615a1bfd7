"""Memoisation with normalised keys and shared bounded stores."""

from memo.keys import make_key
from memo.memoize import CacheInfo, memoize
from memo.store import MemoryStore

__all__ = ["CacheInfo", "MemoryStore", "make_key", "memoize"]
__version__ = "0.8.1"
