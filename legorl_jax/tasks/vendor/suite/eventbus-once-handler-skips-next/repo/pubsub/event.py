"""Event: what handlers receive."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Event:
    topic: str
    payload: Any = None
    sequence: int = 0  # position in the bus's publish order, starting at 1
