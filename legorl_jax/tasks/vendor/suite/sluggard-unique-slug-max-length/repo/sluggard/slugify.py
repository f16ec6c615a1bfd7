"""slugify(): text -> lowercase ASCII words joined by a separator, optionally length-limited."""

from __future__ import annotations

import re
from collections.abc import Iterable

from sluggard.stopwords import resolve_stopwords
from sluggard.translit import transliterate

_WORD = re.compile(r"[A-Za-z0-9]+")


def fit_length(slug: str, max_length: int | None, separator: str = "-") -> str:
    """Shortens a slug to at most max_length characters, cutting at a separator when one allows it."""
    if max_length is None or len(slug) <= max_length:
        return slug
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    window = slug[: max_length + len(separator)]
    cut = window.rfind(separator)
    if cut > 0:
        return slug[:cut]
    return slug[:max_length].rstrip(separator)


def slugify(
    text: str,
    separator: str = "-",
    max_length: int | None = None,
    lowercase: bool = True,
    stopwords: str | Iterable[str] | None = None,
) -> str:
    if not separator or _WORD.fullmatch(separator):
        raise ValueError(f"separator must be non-empty punctuation, got {separator!r}")
    ascii_text = transliterate(text).replace("'", "")
    words = _WORD.findall(ascii_text)
    drop = resolve_stopwords(stopwords)
    kept = [w for w in words if w.casefold() not in drop] or words  # never strip a title to nothing
    slug = separator.join(w.lower() if lowercase else w for w in kept)
    return fit_length(slug, max_length, separator)
