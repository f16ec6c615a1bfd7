import math

import pytest

from throttle import ManualClock, TokenBucket


def test_bucket_spends_and_refills_over_time():
    clock = ManualClock()
    bucket = TokenBucket(capacity=3, rate=1, clock=clock)
    assert all(bucket.try_acquire() for _ in range(3))
    assert not bucket.try_acquire()
    clock.advance(2)
    assert bucket.tokens == 2
    clock.advance(100)
    assert bucket.tokens == 3


def test_wait_time_until_tokens_are_back():
    clock = ManualClock()
    bucket = TokenBucket(capacity=4, rate=2, clock=clock, tokens=0)
    assert bucket.wait_time(3) == 1.5
    assert bucket.wait_time(5) == math.inf
    clock.advance(2)
    assert bucket.wait_time(3) == 0


def test_manual_clock_cannot_go_backwards():
    clock = ManualClock(10)
    with pytest.raises(ValueError, match="-1"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="5"):
        clock.set(5)
