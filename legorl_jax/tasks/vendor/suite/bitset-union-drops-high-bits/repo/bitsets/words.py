"""64-bit word arithmetic shared by the bitset and range code."""

from __future__ import annotations

from collections.abc import Iterator

WORD_BITS = 64
WORD_MASK = (1 << WORD_BITS) - 1


def locate(index: int) -> tuple[int, int]:
    """(word number, bit mask inside that word) of a bit index."""
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"bitset members must be int, got {type(index).__name__}")
    if index < 0:
        raise ValueError(f"bitset members must be non-negative, got {index}")
    word, bit = divmod(index, WORD_BITS)
    return word, 1 << bit


def bits_of(word: int, base: int) -> Iterator[int]:
    """Indices of the set bits of `word`, ascending, offset by `base`."""
    while word:
        low = word & -word
        yield base + low.bit_length() - 1
        word ^= low


def trim(words: list[int]) -> list[int]:
    """Drops trailing zero words in place (keeps the list short after removals)."""
    while words and words[-1] == 0:
        words.pop()
    return words
