"""Transliteration to ASCII: a table for letters Unicode does not decompose, then NFKD."""

from __future__ import annotations

import unicodedata

# Letters with no canonical decomposition into ASCII base + combining mark.
_TABLE = {
    "ß": "ss", "ẞ": "SS", "æ": "ae", "Æ": "AE", "œ": "oe", "Œ": "OE", "ø": "o", "Ø": "O",
    "ł": "l", "Ł": "L", "đ": "d", "Đ": "D", "ð": "d", "Ð": "D", "þ": "th", "Þ": "Th",
    "ı": "i", "ħ": "h", "Ħ": "H", "ŧ": "t", "Ŧ": "T",
    "–": "-", "—": "-", "‘": "'", "’": "'", "“": '"', "”": '"', "&": " and ",
}


def transliterate(text: str) -> str:
    """Best-effort ASCII; characters with no ASCII form are dropped."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    mapped = "".join(_TABLE.get(ch, ch) for ch in text)
    decomposed = unicodedata.normalize("NFKD", mapped)
    return "".join(ch for ch in decomposed if ord(ch) < 128)
