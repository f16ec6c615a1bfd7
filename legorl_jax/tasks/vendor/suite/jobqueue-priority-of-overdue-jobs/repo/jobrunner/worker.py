"""Worker: runs due jobs, reschedules retries and periodic jobs.

`run_pending()` works at one instant (the clock's time when it is called): it keeps asking the
queue for the next due job until none is left, so jobs submitted by running jobs are picked up if
they are due by then. Retries are scheduled relative to that instant and are therefore never run in
the same call.
"""

from __future__ import annotations

import math

from jobrunner.backoff import Backoff
from jobrunner.job import Job, JobState
from jobrunner.queue import JobQueue


class Worker:
    def __init__(self, queue: JobQueue, clock, backoff: Backoff | None = None) -> None:
        self.queue = queue
        self.clock = clock
        self.backoff = backoff if backoff is not None else Backoff()
        self.history: list[tuple[float, str, str]] = []  # (time, job id, outcome)

    def run_pending(self) -> list[str]:
        """Runs every job due now; returns their ids in the order they ran."""
        now = self.clock.now()
        ran: list[str] = []
        while (job := self.queue.pop_due(now)) is not None:
            self._run(job, now)
            ran.append(job.id)
        return ran

    def run_until_idle(self, max_runs: int = 1000) -> list[str]:
        """Advances the clock from due time to due time until the queue is empty."""
        ran: list[str] = []
        while len(ran) < max_runs:
            when = self.queue.next_run_at()
            if when is None:
                return ran
            if when > self.clock.now():
                self.clock.set(when)
            ran.extend(self.run_pending())
        raise RuntimeError(f"queue not idle after {max_runs} runs (periodic jobs never finish)")

    def _run(self, job: Job, now: float) -> None:
        try:
            job.result = job.run()
        except Exception as exc:
            job.errors.append(exc)
            self.history.append((now, job.id, "error"))
            if job.attempts < job.max_attempts:
                job.run_at = now + self.backoff.delay(job.attempts)
                self.queue.push(job)
            else:
                job.state = JobState.FAILED
            return
        self.history.append((now, job.id, "ok"))
        if job.interval is not None:
            # Next slot on the grid strictly after now; missed slots are skipped. The grid is
            # anchored at the first run, so a retried run does not shift later ones.
            slots = math.floor((now - job.anchor) / job.interval) + 1
            job.run_at = job.anchor + slots * job.interval
            job.attempts = 0
            self.queue.push(job)
        else:
            job.state = JobState.DONE
