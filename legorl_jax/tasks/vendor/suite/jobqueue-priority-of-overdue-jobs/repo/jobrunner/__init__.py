"""A single-process job queue."""

from jobrunner.backoff import Backoff
from jobrunner.clock import FakeClock, SystemClock
from jobrunner.job import Job, JobState
from jobrunner.queue import JobQueue
from jobrunner.worker import Worker

__all__ = ["Backoff", "FakeClock", "Job", "JobQueue", "JobState", "SystemClock", "Worker"]
__version__ = "0.4.0"
