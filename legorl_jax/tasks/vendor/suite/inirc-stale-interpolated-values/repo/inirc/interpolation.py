"""Resolving ${key} and ${section:key} references, with a cache of resolved values."""

from __future__ import annotations

import re
from collections.abc import Callable

from inirc.errors import InterpolationError
from inirc.parser import normalize_key

_REFERENCE = re.compile(r"\$(?:\$|\{([^}:]+)(?::([^}]+))?\})")
MAX_DEPTH = 10

# Looks up a raw value: (section, key) -> raw text or None when absent.
RawLookup = Callable[[str, str], "str | None"]


class Interpolator:
    def __init__(self, lookup: RawLookup) -> None:
        self._lookup = lookup
        self._cache: dict[tuple[str, str], str] = {}

    def resolve(self, section: str, key: str) -> str:
        cache_key = (section, normalize_key(key))
        if cache_key not in self._cache:
            self._cache[cache_key] = self._resolve(section, normalize_key(key), [])
        return self._cache[cache_key]

    def forget(self, section: str, key: str) -> None:
        self._cache.pop((section, normalize_key(key)), None)

    def clear(self) -> None:
        self._cache.clear()

    def _resolve(self, section: str, key: str, chain: list[tuple[str, str]]) -> str:
        if (section, key) in chain:
            cycle = " -> ".join(f"{s}:{k}" for s, k in chain + [(section, key)])
            raise InterpolationError(f"reference cycle: {cycle}")
        if len(chain) >= MAX_DEPTH:
            raise InterpolationError(f"references nested deeper than {MAX_DEPTH} at {section}:{key}")
        raw = self._lookup(section, key)
        if raw is None:
            where = " -> ".join(f"{s}:{k}" for s, k in chain) or f"{section}:{key}"
            raise InterpolationError(f"no option {key!r} in section [{section}] (needed by {where})")
        chain = chain + [(section, key)]

        def substitute(m: re.Match[str]) -> str:
            if m.group(0) == "$$":
                return "$"
            if m.group(2) is None:
                return self._resolve(section, normalize_key(m.group(1)), chain)
            return self._resolve(m.group(1).strip(), normalize_key(m.group(2)), chain)

        return _REFERENCE.sub(substitute, raw)
