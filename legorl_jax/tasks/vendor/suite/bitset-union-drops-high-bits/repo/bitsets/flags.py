"""FlagSet: a fixed vocabulary of flag names mapped to bit positions of an int mask.

Useful for permission masks stored in a database column: `encode` turns names into the int,
`decode` turns the int back. Unknown names and bits outside the vocabulary are errors.
"""

from __future__ import annotations

from collections.abc import Iterable

from bitsets.bitset import Bitset


class FlagSet:
    def __init__(self, names: Iterable[str]) -> None:
        self._names = list(names)
        if len(set(self._names)) != len(self._names):
            raise ValueError(f"flag names must be unique, got {self._names!r}")
        for name in self._names:
            if not isinstance(name, str) or not name:
                raise ValueError(f"flag names must be non-empty strings, got {name!r}")
        self._bit = {name: i for i, name in enumerate(self._names)}
        self._all = Bitset(range(len(self._names)))

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def encode(self, names: Iterable[str]) -> int:
        bits = Bitset()
        for name in names:
            if name not in self._bit:
                raise ValueError(f"unknown flag {name!r}; known: {self._names!r}")
            bits.add(self._bit[name])
        return bits.to_int()

    def decode(self, mask: int) -> set[str]:
        bits = Bitset.from_int(mask)
        unknown = bits - self._all
        if unknown:
            raise ValueError(f"mask {mask:#x} has bits outside the flag set: {list(unknown)}")
        return {self._names[i] for i in bits}

    def all(self) -> int:
        return self._all.to_int()
