"""Subscription: one handler registered for one pattern."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(eq=False)
class Subscription:
    pattern: str
    handler: Callable
    priority: int = 0
    once: bool = False
    seq: int = 0
    active: bool = field(default=True)
    _bus: object = field(default=None, repr=False)

    def sort_key(self) -> tuple[int, int]:
        return (-self.priority, self.seq)

    def cancel(self) -> bool:
        """Unsubscribes; False if it was no longer subscribed."""
        if not self.active or self._bus is None:
            return False
        return self._bus.unsubscribe(self)
