"""CompletionIndex: phrases with weights, completed from a typed prefix.

Phrases are stored under their normalised key (see `normalize`), so "New York" and "new  york" are
the same entry; the display form of the first `add` is kept and later adds only change the weight.
"""

from __future__ import annotations

from typeahead.normalize import display_form, normalize_key, normalize_prefix
from typeahead.ranking import Entry, top_k
from typeahead.trie import Trie


class CompletionIndex:
    def __init__(self) -> None:
        self._trie = Trie()

    def __len__(self) -> int:
        return len(self._trie)

    def __contains__(self, phrase: object) -> bool:
        return isinstance(phrase, str) and normalize_key(phrase) in self._trie

    def add(self, phrase: str, weight: float = 1.0) -> None:
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            raise ValueError(f"weight must be a non-negative number, got {weight!r}")
        key = normalize_key(phrase)
        if not key:
            raise ValueError(f"phrase must contain a non-space character, got {phrase!r}")
        existing = self._trie.get(key)
        if existing is None:
            self._trie[key] = Entry(display_form(phrase), float(weight))
        else:
            existing.weight = float(weight)

    def bump(self, phrase: str, amount: float = 1.0) -> float:
        """Adds `amount` to the weight of an existing phrase (e.g. when a user picks it)."""
        key = normalize_key(phrase)
        entry = self._trie.get(key)
        if entry is None:
            raise KeyError(phrase)
        entry.weight += amount
        return entry.weight

    def remove(self, phrase: str) -> None:
        del self._trie[normalize_key(phrase)]

    def weight(self, phrase: str) -> float:
        entry = self._trie.get(normalize_key(phrase))
        if entry is None:
            raise KeyError(phrase)
        return entry.weight

    def complete(self, prefix: str, limit: int = 10) -> list[str]:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive int, got {limit!r}")
        key = normalize_prefix(prefix)
        return [entry.display for entry in top_k((e for _, e in self._trie.items(key)), limit)]
