"""QueryDict: an ordered mapping where each key may carry several values."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping


class QueryDict(Mapping[str, str]):
    """`d[key]` is the last value (like most frameworks); getlist() returns them all in order."""

    def __init__(self, pairs: Iterable[tuple[str, str]] = ()) -> None:
        self._pairs: list[tuple[str, str]] = []
        for key, value in pairs:
            self.add(key, value)

    def add(self, key: str, value: str) -> None:
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"keys and values must be str, got {key!r}: {value!r}")
        self._pairs.append((key, value))

    def __getitem__(self, key: str) -> str:
        for k, v in reversed(self._pairs):
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        seen: dict[str, None] = {}
        for k, _ in self._pairs:
            seen.setdefault(k, None)
        return iter(seen)

    def __len__(self) -> int:
        return len({k for k, _ in self._pairs})

    def getlist(self, key: str) -> list[str]:
        return [v for k, v in self._pairs if k == key]

    def pairs(self) -> list[tuple[str, str]]:
        return list(self._pairs)

    def setlist(self, key: str, values: Iterable[str]) -> None:
        """Replaces all values of key, keeping the position of its first occurrence."""
        values = list(values)
        first = next((i for i, (k, _) in enumerate(self._pairs) if k == key), len(self._pairs))
        rest = [(k, v) for k, v in self._pairs if k != key]
        before = [p for p in self._pairs[:first] if p[0] != key]
        self._pairs = before + [(key, v) for v in values] + rest[len(before):]

    def to_dict(self, multi: bool = False) -> dict[str, str | list[str]]:
        return {k: (self.getlist(k) if multi else self[k]) for k in self}

    def __repr__(self) -> str:
        return f"QueryDict({self._pairs!r})"
