"""Splitting a paragraph into words and breaking words that cannot fit on a line."""

from __future__ import annotations

import re

from wrapwell.width import display_width, split_at_width

_WHITESPACE = re.compile(r"\s+")


def split_words(text: str) -> list[str]:
    """Words are maximal runs of non-whitespace; all whitespace (newlines too) separates them."""
    return [w for w in _WHITESPACE.split(text.strip()) if w]


def break_word(word: str, columns: int) -> list[str]:
    """Breaks an over-long word into pieces of at most `columns` columns, preferring hyphens."""
    pieces: list[str] = []
    rest = word
    while display_width(rest) > columns:
        head, tail = split_at_width(rest, columns)
        hyphen = head.rfind("-")
        if 0 < hyphen < len(head) - 1:
            head, tail = head[: hyphen + 1], head[hyphen + 1 :] + tail
        pieces.append(head)
        rest = tail
    if rest:
        pieces.append(rest)
    return pieces
