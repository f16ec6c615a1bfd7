import pytest

from jobrunner import JobQueue, JobState


def noop():
    return None


def test_jobs_come_out_when_due_in_time_order():
    queue = JobQueue()
    queue.submit("late", noop, run_at=20)
    queue.submit("early", noop, run_at=10)
    assert queue.pop_due(5) is None
    assert queue.pop_due(10).id == "early"
    assert queue.pop_due(15) is None
    assert queue.next_run_at() == 20


def test_same_time_jobs_by_priority_then_submission():
    queue = JobQueue()
    queue.submit("a", noop, run_at=5, priority=1)
    queue.submit("b", noop, run_at=5, priority=9)
    queue.submit("c", noop, run_at=5, priority=1)
    assert [queue.pop_due(5).id for _ in range(3)] == ["b", "a", "c"]


def test_cancelled_jobs_are_skipped():
    queue = JobQueue()
    job = queue.submit("x", noop, run_at=1)
    queue.submit("y", noop, run_at=2)
    assert queue.cancel("x")
    assert not queue.cancel("x")
    assert job.state is JobState.CANCELLED
    assert queue.next_run_at() == 2
    assert queue.pop_due(10).id == "y"
    assert len(queue) == 0


def test_ids_are_unique_among_pending_jobs():
    queue = JobQueue()
    queue.submit("x", noop)
    with pytest.raises(ValueError, match="'x'"):
        queue.submit("x", noop)
    queue.pop_due(0)
    queue.submit("x", noop)


def test_job_validation():
    queue = JobQueue()
    with pytest.raises(TypeError, match="callable"):
        queue.submit("j", "not callable")
    with pytest.raises(ValueError, match="max_attempts"):
        queue.submit("j", noop, max_attempts=0)
    with pytest.raises(ValueError, match="interval"):
        queue.every("j", 0, noop)
