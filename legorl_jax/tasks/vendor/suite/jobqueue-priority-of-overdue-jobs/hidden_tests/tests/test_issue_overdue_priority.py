from jobrunner import FakeClock, JobQueue, JobState, Worker


def noop():
    return None


def setup():
    clock = FakeClock()
    queue = JobQueue()
    return clock, queue, Worker(queue, clock)


def test_readme_example_urgent_job_first_after_falling_behind():
    clock, queue, worker = setup()
    queue.submit("report", noop, run_at=60, priority=0)
    queue.submit("alert", noop, run_at=90, priority=10)
    clock.advance(120)
    assert worker.run_pending() == ["alert", "report"]


def test_due_jobs_run_by_priority_and_future_jobs_wait():
    clock, queue, worker = setup()
    queue.submit("p0", noop, run_at=1, priority=0)
    queue.submit("p5", noop, run_at=2, priority=5)
    queue.submit("p1", noop, run_at=3, priority=1)
    queue.submit("urgent-later", noop, run_at=50, priority=100)
    clock.set(10)
    assert worker.run_pending() == ["p5", "p1", "p0"]
    assert queue.next_run_at() == 50


def test_equal_priorities_among_due_jobs_by_run_at_then_submission():
    clock, queue, worker = setup()
    queue.submit("c", noop, run_at=3, priority=2)
    queue.submit("a", noop, run_at=1, priority=2)
    queue.submit("b", noop, run_at=3, priority=2)
    queue.submit("low", noop, run_at=0, priority=1)
    clock.set(5)
    assert worker.run_pending() == ["a", "c", "b", "low"]


def test_pop_due_picks_the_highest_priority_and_keeps_the_rest_pending():
    queue = JobQueue()
    queue.submit("old", noop, run_at=1, priority=0)
    queue.submit("vip", noop, run_at=2, priority=5)
    assert queue.pop_due(10).id == "vip"
    assert queue.next_run_at() == 1
    assert len(queue) == 1
    assert queue.pop_due(10).id == "old"
    assert queue.pop_due(10) is None


def test_urgent_job_submitted_during_a_pass_jumps_the_line():
    clock, queue, worker = setup()
    clock.set(100)
    queue.submit("spawner", lambda: queue.submit("hotfix", noop, run_at=100, priority=50),
                 run_at=10, priority=3)
    queue.submit("cleanup", noop, run_at=20, priority=1)
    queue.submit("backup", noop, run_at=30, priority=2)
    assert worker.run_pending() == ["spawner", "hotfix", "backup", "cleanup"]


def test_cancelling_a_due_job_from_another_job():
    clock, queue, worker = setup()
    queue.submit("canceller", lambda: queue.cancel("victim"), run_at=5, priority=9)
    victim = queue.submit("victim", noop, run_at=1, priority=1)
    queue.submit("bystander", noop, run_at=2, priority=0)
    clock.set(10)
    assert worker.run_pending() == ["canceller", "bystander"]
    assert victim.state is JobState.CANCELLED
    assert len(queue) == 0 and queue.next_run_at() is None
