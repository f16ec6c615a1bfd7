"""Bitset: a mutable set of non-negative ints backed by a list of 64-bit words.

Word k holds members 64k .. 64k+63; bit b of word k is member 64k+b. The list grows on demand and is
trimmed after operations that may clear the top words, so `_words` never ends in a zero word.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator

from bitsets import words as w


class Bitset:
    __slots__ = ("_words",)

    def __init__(self, members: Iterable[int] = ()) -> None:
        self._words: list[int] = []
        for member in members:
            self.add(member)

    @classmethod
    def _from_words(cls, words: list[int]) -> Bitset:
        out = cls()
        out._words = w.trim(words)
        return out

    @classmethod
    def from_int(cls, value: int) -> Bitset:
        """The bitset whose members are the set bits of a non-negative int."""
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"from_int needs a non-negative int, got {value!r}")
        words = []
        while value:
            words.append(value & w.WORD_MASK)
            value >>= w.WORD_BITS
        return cls._from_words(words)

    def to_int(self) -> int:
        value = 0
        for k, word in enumerate(self._words):
            value |= word << (k * w.WORD_BITS)
        return value

    # -- element operations --------------------------------------------------------------------

    def add(self, member: int) -> None:
        word, mask = w.locate(member)
        if word >= len(self._words):
            self._words.extend([0] * (word + 1 - len(self._words)))
        self._words[word] |= mask

    def discard(self, member: int) -> None:
        word, mask = w.locate(member)
        if word < len(self._words):
            self._words[word] &= ~mask
            w.trim(self._words)

    def remove(self, member: int) -> None:
        if member not in self:
            raise KeyError(member)
        self.discard(member)

    def __contains__(self, member: object) -> bool:
        if isinstance(member, bool) or not isinstance(member, int) or member < 0:
            return False
        word, mask = w.locate(member)
        return word < len(self._words) and bool(self._words[word] & mask)

    def __len__(self) -> int:
        return sum(word.bit_count() for word in self._words)

    def __bool__(self) -> bool:
        return bool(self._words)

    def __iter__(self) -> Iterator[int]:
        for k, word in enumerate(self._words):
            yield from w.bits_of(word, k * w.WORD_BITS)

    def __repr__(self) -> str:
        return f"Bitset({list(self)!r})"

    def max(self) -> int:
        if not self._words:
            raise ValueError("max() of an empty bitset")
        return (len(self._words) - 1) * w.WORD_BITS + self._words[-1].bit_length() - 1

    def copy(self) -> Bitset:
        return Bitset._from_words(list(self._words))

    # -- set algebra ---------------------------------------------------------------------------

    def _combine(self, other: object, op: Callable[[int, int], int]) -> list[int]:
        if not isinstance(other, Bitset):
            raise TypeError(f"expected a Bitset, got {type(other).__name__}")
        return [op(a, b) for a, b in zip(self._words, other._words)]

    def __or__(self, other: Bitset) -> Bitset:
        return Bitset._from_words(self._combine(other, operator.or_))

    def __and__(self, other: Bitset) -> Bitset:
        return Bitset._from_words(self._combine(other, operator.and_))

    def __xor__(self, other: Bitset) -> Bitset:
        return Bitset._from_words(self._combine(other, operator.xor))

    def __sub__(self, other: Bitset) -> Bitset:
        return Bitset._from_words(self._combine(other, lambda a, b: a & ~b))

    def __ior__(self, other: Bitset) -> Bitset:
        self._words = w.trim(self._combine(other, operator.or_))
        return self

    def __iand__(self, other: Bitset) -> Bitset:
        self._words = w.trim(self._combine(other, operator.and_))
        return self

    def __isub__(self, other: Bitset) -> Bitset:
        self._words = w.trim(self._combine(other, lambda a, b: a & ~b))
        return self

    def union(self, *others: Bitset) -> Bitset:
        out = self.copy()
        for other in others:
            out |= other
        return out

    def isdisjoint(self, other: Bitset) -> bool:
        return not (self & other)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Bitset):
            return NotImplemented
        return self._words == other._words

    def __le__(self, other: Bitset) -> bool:
        return not (self - other)

    def __ge__(self, other: Bitset) -> bool:
        return other <= self

    def __lt__(self, other: Bitset) -> bool:
        return self <= other and self != other

    def __gt__(self, other: Bitset) -> bool:
        return other < self

    __hash__ = None  # mutable

    # -- runs ------------------------------------------------------------------------------------

    def to_ranges(self) -> list[tuple[int, int]]:
        """Maximal runs of consecutive members as half-open (start, end) pairs."""
        runs: list[tuple[int, int]] = []
        for member in self:
            if runs and runs[-1][1] == member:
                runs[-1] = (runs[-1][0], member + 1)
            else:
                runs.append((member, member + 1))
        return runs

    @classmethod
    def from_ranges(cls, ranges: Iterable[tuple[int, int]]) -> Bitset:
        out = cls()
        for start, end in ranges:
            if end < start:
                raise ValueError(f"range end must be >= start, got ({start}, {end})")
            for member in range(start, end):
                out.add(member)
        return out
