"""The memoize decorator.

Each decorated function gets a namespace inside its store (a private store unless one is passed),
a CallNormalizer for its signature, and hit/miss counters. Keys are `make_key` of the normalised
call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

from memo.calls import CallNormalizer
from memo.keys import make_key
from memo.store import MISSING, MemoryStore


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    maxsize: int | None
    currsize: int


def _namespace(func: Callable) -> str:
    return f"{func.__module__}.{func.__qualname__}"


def memoize(func: Callable | None = None, *, maxsize: int | None = 128, typed: bool = False,
            store: MemoryStore | None = None) -> Callable:
    """Decorator; usable bare (`@memoize`) or with options (`@memoize(maxsize=10)`)."""
    if func is None:
        return lambda f: memoize(f, maxsize=maxsize, typed=typed, store=store)
    if not callable(func):
        raise TypeError(f"memoize needs a callable, got {func!r}")
    if store is not None and not isinstance(store, MemoryStore):
        raise TypeError(f"store must be a MemoryStore, got {type(store).__name__}")

    own_store = store if store is not None else MemoryStore(maxsize)
    namespace = _namespace(func)
    normalizer = CallNormalizer(func)
    counters = {"hits": 0, "misses": 0}

    def key_of(args: tuple, kwargs: dict):
        return make_key(normalizer.normalize(args, kwargs), typed)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        key = key_of(args, kwargs)
        value = own_store.get(namespace, key)
        if value is not MISSING:
            counters["hits"] += 1
            return value
        counters["misses"] += 1
        value = func(*args, **kwargs)
        own_store.set(namespace, key, value)
        return value

    def cache_info() -> CacheInfo:
        return CacheInfo(counters["hits"], counters["misses"], own_store.maxsize, own_store.count(namespace))

    def cache_clear() -> None:
        own_store.clear(namespace)
        counters["hits"] = counters["misses"] = 0

    def invalidate(*args: Any, **kwargs: Any) -> bool:
        return own_store.delete(namespace, key_of(args, kwargs))

    wrapper.cache_info = cache_info
    wrapper.cache_clear = cache_clear
    wrapper.invalidate = invalidate
    wrapper.__wrapped__ = func
    return wrapper
