"""Weighted prefix completion over a trie."""

from typeahead.index import CompletionIndex
from typeahead.normalize import normalize_key, normalize_prefix
from typeahead.trie import Trie

__all__ = ["CompletionIndex", "Trie", "normalize_key", "normalize_prefix"]
__version__ = "1.1.0"
