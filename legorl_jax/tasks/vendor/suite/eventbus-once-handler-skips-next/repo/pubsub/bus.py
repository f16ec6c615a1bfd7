"""EventBus: subscriptions kept sorted by (priority desc, subscription order) in one list.

`publish` walks that list and calls each matching, active handler. `replay=True` on subscribe first
delivers the matching events still in the bus's history (oldest first), so a late subscriber can
catch up.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable
from typing import Any

from pubsub.errors import DeliveryError
from pubsub.event import Event
from pubsub.history import History
from pubsub.subscription import Subscription
from pubsub.topics import matches, validate_pattern, validate_topic

_POLICIES = ("raise", "collect")


class EventBus:
    def __init__(self, history: int = 0, errors: str = "raise") -> None:
        if errors not in _POLICIES:
            raise ValueError(f"errors must be one of {_POLICIES}, got {errors!r}")
        self.errors = errors
        self.history = History(history)
        self._subs: list[Subscription] = []
        self._seq = itertools.count()
        self._published = 0

    def subscribe(self, pattern: str, handler: Callable[[Event], Any], priority: int = 0,
                  once: bool = False, replay: bool = False) -> Subscription:
        validate_pattern(pattern)
        if not callable(handler):
            raise TypeError(f"handler must be callable, got {handler!r}")
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"priority must be an int, got {priority!r}")
        sub = Subscription(pattern, handler, priority, once, next(self._seq), True, self)
        if replay:
            for event in self.history.matching(pattern):
                handler(event)
                if once:
                    sub.active = False
                    return sub
        keys = [s.sort_key() for s in self._subs]
        self._subs.insert(bisect.bisect_right(keys, sub.sort_key()), sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> bool:
        if not sub.active:
            return False
        sub.active = False
        self._subs.remove(sub)
        return True

    def subscribers(self, topic: str) -> list[Subscription]:
        validate_topic(topic)
        return [s for s in self._subs if matches(s.pattern, topic)]

    def __len__(self) -> int:
        return len(self._subs)

    def publish(self, topic: str, payload: Any = None) -> int:
        """Delivers an event; returns how many handlers received it."""
        validate_topic(topic)
        self._published += 1
        event = Event(topic, payload, self._published)
        self.history.record(event)
        failures: list[tuple[object, BaseException]] = []
        delivered = 0
        for sub in self._subs:
            if not matches(sub.pattern, topic):
                continue
            if sub.once:
                self.unsubscribe(sub)
            delivered += 1
            try:
                sub.handler(event)
            except Exception as exc:
                if self.errors == "raise":
                    raise
                failures.append((sub.handler, exc))
        if failures:
            raise DeliveryError(topic, failures)
        return delivered
