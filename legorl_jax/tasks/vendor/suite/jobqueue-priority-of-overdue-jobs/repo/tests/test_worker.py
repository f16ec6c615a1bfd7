import pytest

from jobrunner import Backoff, FakeClock, JobQueue, JobState, Worker


def setup():
    clock = FakeClock()
    queue = JobQueue()
    return clock, queue, Worker(queue, clock, backoff=Backoff(base=1, factor=2))


def test_runs_only_due_jobs_and_records_results():
    clock, queue, worker = setup()
    job = queue.submit("sum", lambda a, b: a + b, 2, 3, run_at=10)
    queue.submit("later", lambda: None, run_at=100)
    clock.advance(10)
    assert worker.run_pending() == ["sum"]
    assert job.result == 5 and job.state is JobState.DONE
    assert len(queue) == 1


def test_failed_job_is_retried_with_backoff_then_marked_failed():
    clock, queue, worker = setup()

    def flaky():
        raise RuntimeError("down")

    job = queue.submit("flaky", flaky, max_attempts=3)
    assert worker.run_until_idle() == ["flaky", "flaky", "flaky"]
    assert [t for t, _, _ in worker.history] == [0, 1, 3]
    assert job.state is JobState.FAILED
    assert len(job.errors) == 3


def test_job_succeeding_on_retry():
    clock, queue, worker = setup()
    outcomes = iter([RuntimeError("once"), "ok"])

    def sometimes():
        result = next(outcomes)
        if isinstance(result, Exception):
            raise result
        return result

    job = queue.submit("s", sometimes)
    worker.run_until_idle()
    assert job.result == "ok" and job.attempts == 2


def test_jobs_submitted_by_jobs_run_in_the_same_pass_when_due():
    clock, queue, worker = setup()
    queue.submit("parent", lambda: queue.submit("child", lambda: None, run_at=clock.now()))
    assert worker.run_pending() == ["parent", "child"]


def test_periodic_job_runs_on_its_grid_and_skips_missed_slots():
    clock, queue, worker = setup()
    ticks = []
    queue.every("tick", 10, lambda: ticks.append(clock.now()), start=5)
    clock.set(5)
    worker.run_pending()
    clock.set(47)
    worker.run_pending()
    assert ticks == [5, 47]
    assert queue.next_run_at() == 55


def test_run_until_idle_refuses_to_spin_forever():
    clock, queue, worker = setup()
    queue.every("forever", 1, lambda: None)
    with pytest.raises(RuntimeError, match="not idle"):
        worker.run_until_idle(max_runs=5)


def test_backoff_delays():
    backoff = Backoff(base=1, factor=2, max_delay=5)
    assert [backoff.delay(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]
    with pytest.raises(ValueError, match="0"):
        backoff.delay(0)
