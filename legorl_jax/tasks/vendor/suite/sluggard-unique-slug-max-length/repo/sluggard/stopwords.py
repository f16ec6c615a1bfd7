"""Stopword lists that can be removed from slugs."""

from __future__ import annotations

from collections.abc import Iterable

ENGLISH = frozenset(
    "a an and are as at be but by for from in into is it of on or that the their this to was with".split()
)
_NAMED = {"english": ENGLISH}


def resolve_stopwords(stopwords: str | Iterable[str] | None) -> frozenset[str]:
    """A named list, an iterable of words (compared case-insensitively), or None for no removal."""
    if stopwords is None:
        return frozenset()
    if isinstance(stopwords, str):
        try:
            return _NAMED[stopwords]
        except KeyError:
            raise ValueError(f"unknown stopword list {stopwords!r}; known: {sorted(_NAMED)}") from None
    return frozenset(w.casefold() for w in stopwords)
