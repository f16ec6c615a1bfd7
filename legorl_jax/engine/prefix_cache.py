"""The prefix cache of the embedded engine: finished requests' KV kept resident in spare slots, keyed by
token ids.

The KV cache (model/cache.py) has `max_running + cache_slots` slots. A running request owns one; when
it finishes, its slot is not wiped but becomes an `Entry`: the token ids whose K/V the slot holds
(prompt + output except the last sampled token, which was never forwarded), the routing rows recorded
when those positions were computed (MoE), the session hint of the request and a use stamp. A new
request looks up the entry sharing its longest prefix (`match`); the engine then gives the request a
slot holding that prefix's K/V, either the entry's own slot (`take`: the request's prompt extends the
whole entry, so the entry would be superseded by the request's own anyway) or a fresh slot the entry
is copied into (the entry stays for others: a shared system prompt is never overwritten by either
session that reads it). The request prefills only the positions from the match on, at least its last
prompt token (its logits give the first output token).

Budget and eviction: at most `max_entries` entries (one slot each) and `max_tokens` cached tokens in
all; past either, the least recently used entry goes, entries without a session hint before those with
one (SGLang's session hint: an agent's conversation stays resident between its turns while other
traffic comes and goes). An entry whose tokens are a prefix of a newer entry's is dropped when the newer
one arrives (every lookup it would serve, the newer one serves at least as far).

The cache is host bookkeeping only: slots are indices into the runner's KV cache, and dropping an entry
frees its slot without touching the device. It is cleared on `flush` and whenever the weights change
(the engine does that: cached K/V computed under old weights must not serve new requests).
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np


@dataclasses.dataclass(eq=False)
class Entry:
    """One resident sequence: `tokens` int32[T] have their K/V at positions 0..T-1 of `slot`."""

    slot: int
    tokens: np.ndarray  # int32[T]
    routing: np.ndarray | None  # uint8|int16[T, L, K] as recorded when computed; None for a dense model
    session: str | None
    stamp: int


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two int arrays."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


class PrefixCache:
    """Entries by slot, with lookup, insertion and LRU eviction (module docstring)."""

    def __init__(self, max_entries: int, max_tokens: int | None = None):
        if not isinstance(max_entries, int) or isinstance(max_entries, bool) or max_entries < 0:
            raise ValueError(f"prefix cache slots must be an int >= 0, got {max_entries!r}")
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            raise ValueError(f"prefix cache max_tokens must be a positive int or None, got {max_tokens!r}")
        self.max_entries, self.max_tokens = max_entries, max_tokens
        self.by_slot: dict[int, Entry] = {}
        self._clock = itertools.count()
        self.evictions = 0

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0

    @property
    def tokens(self) -> int:
        return sum(len(e.tokens) for e in self.by_slot.values())

    def match(self, prompt: np.ndarray) -> tuple[Entry | None, int, bool]:
        """(entry, usable prefix m, whole entry matched) of the longest match; m < len(prompt) always.

        The entry's use stamp is refreshed on a hit. (None, 0, False) when nothing matches.
        """
        best, best_len = None, 0
        for entry in self.by_slot.values():
            n = common_prefix(entry.tokens, prompt)
            if n > best_len or (n == best_len and best is not None and n and entry.stamp > best.stamp):
                best, best_len = entry, n
        usable = min(best_len, len(prompt) - 1)
        if best is None or usable <= 0:
            return None, 0, False
        best.stamp = next(self._clock)
        return best, usable, best_len == len(best.tokens)

    def take(self, entry: Entry) -> int:
        """Removes `entry` and hands its slot (with its K/V) to a request."""
        del self.by_slot[entry.slot]
        return entry.slot

    def insert(self, slot: int, tokens: np.ndarray, routing: np.ndarray | None, session: str | None) -> None:
        """Keeps the K/V of `tokens` in `slot` (the slot must be free of entries); evicts past the budget."""
        if not self.enabled or len(tokens) == 0:
            return
        if slot in self.by_slot:
            raise RuntimeError(f"slot {slot} already holds a cached entry")
        for other in list(self.by_slot.values()):
            if len(other.tokens) <= len(tokens) and common_prefix(other.tokens, tokens) == len(other.tokens):
                del self.by_slot[other.slot]  # superseded: the new entry serves its every lookup
        self.by_slot[slot] = Entry(slot, tokens.astype(np.int32), routing, session, next(self._clock))
        while self.by_slot and (
            len(self.by_slot) > self.max_entries
            or (self.max_tokens is not None and self.tokens > self.max_tokens)
        ):
            victim = min(self.by_slot.values(), key=lambda e: (e.session is not None, e.stamp))
            del self.by_slot[victim.slot]
            self.evictions += 1

    def flush(self) -> int:
        """Drops every entry; returns how many there were."""
        n = len(self.by_slot)
        self.by_slot.clear()
        return n

    def stats(self) -> dict[str, int]:
        return {
            "entries": len(self.by_slot),
            "max_entries": self.max_entries,
            "tokens": self.tokens,
            "max_tokens": -1 if self.max_tokens is None else self.max_tokens,
            "evictions": self.evictions,
        }
