"""DeliveryError: one or more handlers raised while an event was delivered."""

from __future__ import annotations


class DeliveryError(Exception):
    def __init__(self, topic: str, failures: list[tuple[object, BaseException]]) -> None:
        names = ", ".join(getattr(h, "__name__", repr(h)) for h, _ in failures)
        super().__init__(f"{len(failures)} handler(s) failed for {topic!r}: {names}")
        self.topic = topic
        self.failures = failures
