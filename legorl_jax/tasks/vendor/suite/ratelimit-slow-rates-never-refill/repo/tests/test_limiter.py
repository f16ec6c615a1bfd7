import pytest

from throttle import ManualClock, RateLimited, RateLimiter


def test_burst_then_refill_per_key():
    clock = ManualClock()
    limiter = RateLimiter("2/second", burst=4, clock=clock)
    decisions = [limiter.hit("alice") for _ in range(5)]
    assert [d.allowed for d in decisions] == [True, True, True, True, False]
    assert decisions[3].remaining == 0
    assert decisions[4].retry_after == 0.5
    assert limiter.hit("bob").allowed
    clock.advance(0.5)
    assert limiter.hit("alice").allowed


def test_peek_does_not_spend():
    limiter = RateLimiter("3/s", clock=ManualClock())
    assert limiter.peek("x") == 3
    limiter.hit("x")
    assert limiter.peek("x") == 2
    assert limiter.peek("x") == 2


def test_prune_drops_only_refilled_buckets():
    clock = ManualClock()
    limiter = RateLimiter("60/minute", burst=5, clock=clock)
    limiter.hit("a", cost=5)
    limiter.hit("b", cost=1)
    clock.advance(1)
    assert limiter.prune() == 1
    assert len(limiter) == 1
    clock.advance(4)
    assert limiter.prune() == 1


def test_decorator_raises_with_retry_after():
    clock = ManualClock()
    limiter = RateLimiter("1/s", clock=clock)

    @limiter.limit(lambda user, **_: user)
    def fetch(user, item):
        return f"{user}:{item}"

    assert fetch("ann", item=1) == "ann:1"
    with pytest.raises(RateLimited) as err:
        fetch("ann", item=2)
    assert err.value.retry_after == 1
    clock.advance(1)
    assert fetch("ann", item=3) == "ann:3"


def test_bad_burst_is_rejected():
    with pytest.raises(ValueError, match="0"):
        RateLimiter("1/s", burst=0)
