"""Display width: how many terminal columns a string occupies."""

from __future__ import annotations

import unicodedata


def char_width(ch: str) -> int:
    """0 for combining marks and control characters, 2 for wide/fullwidth, else 1."""
    if unicodedata.combining(ch):
        return 0
    cat = unicodedata.category(ch)
    if cat in ("Cc", "Cf") and ch not in "\t":
        return 0
    if unicodedata.east_asian_width(ch) in ("W", "F"):
        return 2
    return 1


def display_width(text: str) -> int:
    return sum(char_width(ch) for ch in text)


def split_at_width(text: str, columns: int) -> tuple[str, str]:
    """Splits text so the head is as long as possible while fitting in columns (at least one char)."""
    if columns < 1:
        raise ValueError(f"columns must be >= 1, got {columns}")
    used = 0
    for i, ch in enumerate(text):
        w = char_width(ch)
        if used + w > columns and i > 0:
            return text[:i], text[i:]
        used += w
    return text, ""
