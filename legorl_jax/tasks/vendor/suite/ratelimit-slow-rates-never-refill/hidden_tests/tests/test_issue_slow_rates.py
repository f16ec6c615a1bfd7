import pytest

from throttle import ManualClock, RateLimiter, parse_rate


def test_per_minute_limit_earns_a_request_back_every_six_seconds():
    clock = ManualClock()
    limiter = RateLimiter("10/minute", clock=clock)
    assert all(limiter.hit("u").allowed for _ in range(10))
    blocked = limiter.hit("u")
    assert not blocked.allowed
    assert blocked.retry_after == pytest.approx(6.0)
    clock.advance(6.5)
    assert limiter.hit("u").allowed
    assert not limiter.hit("u").allowed


def test_fractional_rates_per_second():
    assert parse_rate("90/minute").per_second == pytest.approx(1.5)
    assert parse_rate("100/15m").per_second == pytest.approx(100 / 900)
    assert parse_rate("1/hour").per_second == pytest.approx(1 / 3600)


def test_non_integer_rate_refills_at_the_right_speed():
    clock = ManualClock()
    limiter = RateLimiter("90/minute", burst=3, clock=clock)
    limiter.hit("k", cost=3)
    clock.advance(2)
    assert limiter.peek("k") == 3


def test_idle_buckets_with_slow_rates_are_pruned_eventually():
    clock = ManualClock()
    limiter = RateLimiter("5/hour", clock=clock)
    limiter.hit("k", cost=5)
    clock.advance(3599)
    assert limiter.prune() == 0
    clock.advance(2)
    assert limiter.prune() == 1


def test_whole_rates_still_refill():
    clock = ManualClock()
    limiter = RateLimiter("2/second", burst=2, clock=clock)
    limiter.hit("k", cost=2)
    clock.advance(1)
    assert limiter.peek("k") == 2
