"""Job: one unit of work and its bookkeeping."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class JobState(enum.Enum):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(eq=False)
class Job:
    id: str
    func: Callable[..., Any]
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    run_at: float = 0.0
    priority: int = 0
    max_attempts: int = 3
    interval: float | None = None  # periodic jobs only: runs at anchor + k * interval
    anchor: float | None = None
    attempts: int = 0
    state: JobState = JobState.PENDING
    result: Any = None
    errors: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"job id must be a non-empty string, got {self.id!r}")
        if not callable(self.func):
            raise TypeError(f"job {self.id!r}: func must be callable, got {self.func!r}")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise TypeError(f"job {self.id!r}: priority must be an int, got {self.priority!r}")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError(f"job {self.id!r}: max_attempts must be a positive int, got {self.max_attempts!r}")
        if self.interval is not None and not self.interval > 0:
            raise ValueError(f"job {self.id!r}: interval must be positive, got {self.interval!r}")

    def run(self) -> Any:
        self.attempts += 1
        return self.func(*self.args, **self.kwargs)
