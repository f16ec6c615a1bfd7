"""JobQueue: pending jobs keyed by the time they may run.

Jobs live in a binary heap ordered by (run_at, -priority, submission number), so the next job to
become due is always at the top. Cancelling is lazy: the job is marked and skipped when it reaches
the top. Job ids are unique among pending jobs.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

from jobrunner.job import Job, JobState


class JobQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Job]] = []
        self._pending: dict[str, Job] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._pending

    def submit(self, job_id: str, func: Callable[..., Any], *args: Any, run_at: float = 0.0,
               priority: int = 0, max_attempts: int = 3, **kwargs: Any) -> Job:
        job = Job(job_id, func, args, kwargs, run_at=run_at, priority=priority, max_attempts=max_attempts)
        self.push(job)
        return job

    def every(self, job_id: str, interval: float, func: Callable[..., Any], *args: Any,
              start: float = 0.0, priority: int = 0, **kwargs: Any) -> Job:
        job = Job(job_id, func, args, kwargs, run_at=start, priority=priority, interval=interval, anchor=start)
        self.push(job)
        return job

    def push(self, job: Job) -> None:
        if job.id in self._pending:
            raise ValueError(f"a job with id {job.id!r} is already pending")
        job.state = JobState.PENDING
        self._pending[job.id] = job
        heapq.heappush(self._heap, (job.run_at, -job.priority, next(self._seq), job))

    def cancel(self, job_id: str) -> bool:
        job = self._pending.pop(job_id, None)
        if job is None:
            return False
        job.state = JobState.CANCELLED
        return True

    def _drop_cancelled(self) -> None:
        while self._heap and self._heap[0][3].state is JobState.CANCELLED:
            heapq.heappop(self._heap)

    def next_run_at(self) -> float | None:
        """When the next pending job becomes due, or None when nothing is pending."""
        self._drop_cancelled()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> Job | None:
        """Removes and returns the job to run next at time `now`, or None if none is due."""
        self._drop_cancelled()
        if not self._heap or self._heap[0][0] > now:
            return None
        job = heapq.heappop(self._heap)[3]
        del self._pending[job.id]
        return job

    def pending(self) -> list[Job]:
        return sorted(self._pending.values(), key=lambda j: (j.run_at, -j.priority))
