"""Alphabets: the digit characters of a base, validated once and indexed for decoding."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Alphabet:
    name: str
    chars: str
    case_insensitive: bool = False
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.chars) < 2:
            raise ValueError(f"alphabet {self.name!r} needs at least 2 characters, got {len(self.chars)}")
        if len(set(self.chars)) != len(self.chars):
            dupes = sorted({c for c in self.chars if self.chars.count(c) > 1})
            raise ValueError(f"alphabet {self.name!r} repeats characters {dupes}")
        index = {c: i for i, c in enumerate(self.chars)}
        if self.case_insensitive:
            index.update({c.lower(): i for i, c in enumerate(self.chars)})
        object.__setattr__(self, "_index", index)

    @property
    def base(self) -> int:
        return len(self.chars)

    @property
    def zero(self) -> str:
        return self.chars[0]

    def value(self, ch: str, position: int) -> int:
        try:
            return self._index[ch]
        except KeyError:
            raise ValueError(f"character {ch!r} at position {position} is not in the {self.name} alphabet") from None


BASE58_BITCOIN = Alphabet("base58-bitcoin", "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz")
BASE58_FLICKR = Alphabet("base58-flickr", "123456789abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ")
BASE62 = Alphabet("base62", "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
BASE36 = Alphabet("base36", "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", case_insensitive=True)
