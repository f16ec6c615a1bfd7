"""Normalisation of phrases and typed prefixes into trie keys.

A phrase and every prefix the user may type for it must normalise to strings where one is a prefix
of the other, so both paths go through the same steps: Unicode NFC, case folding, whitespace runs
collapsed to one space. A prefix keeps one trailing space ("new " must not match "newark").
"""

from __future__ import annotations

import re
import unicodedata

_SPACES = re.compile(r"\s+")


def _check(text: object, name: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    return text


def normalize_key(phrase: str) -> str:
    """The trie key of a stored phrase."""
    text = unicodedata.normalize("NFC", _check(phrase, "phrase")).casefold()
    return _SPACES.sub(" ", text).strip()


def normalize_prefix(prefix: str) -> str:
    """The trie key of what the user typed so far."""
    text = unicodedata.normalize("NFC", _check(prefix, "prefix")).lower()
    return _SPACES.sub(" ", text).lstrip()


def display_form(phrase: str) -> str:
    """The phrase as shown to the user: composed accents, single spaces, original case."""
    text = unicodedata.normalize("NFC", _check(phrase, "phrase"))
    return _SPACES.sub(" ", text).strip()
