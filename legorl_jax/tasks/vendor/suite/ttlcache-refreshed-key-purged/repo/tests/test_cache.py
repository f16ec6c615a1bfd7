import pytest

from ttlcache import ManualClock, TTLCache


def make(maxsize=3, ttl=None, sliding=False):
    clock = ManualClock()
    return clock, TTLCache(maxsize=maxsize, ttl=ttl, clock=clock, sliding=sliding)


def test_entries_expire_at_their_deadline():
    clock, cache = make(ttl=10)
    cache.set("a", 1)
    clock.advance(9.5)
    assert cache.get("a") == 1
    clock.advance(0.5)
    assert cache.get("a") is None
    assert "a" not in cache


def test_per_entry_ttl_and_no_expiry():
    clock, cache = make(ttl=10)
    cache.set("short", 1, ttl=1)
    cache.set("forever", 2, ttl=None)
    clock.advance(1000)
    assert cache.get("short") is None
    assert cache.get("forever") == 2
    assert cache.ttl_remaining("forever") is None


def test_least_recently_used_is_evicted_when_full():
    _, cache = make(maxsize=2)
    cache.set("a", 1)
    cache.set("b", 2)
    cache.get("a")
    cache.set("c", 3)
    assert cache.keys() == ["a", "c"]
    assert cache.stats.evictions == 1


def test_expired_entries_make_room_before_live_ones_are_evicted():
    clock, cache = make(maxsize=2)
    cache.set("old", 1, ttl=5)
    cache.set("live", 2)
    clock.advance(6)
    cache.set("new", 3)
    assert cache.keys() == ["live", "new"]
    assert cache.stats.evictions == 0
    assert cache.stats.expirations == 1


def test_len_and_purge_drop_expired_entries():
    clock, cache = make(maxsize=10, ttl=5)
    for i in range(4):
        cache.set(i, i)
        clock.advance(2)
    assert len(cache) == 2
    clock.advance(10)
    assert cache.purge() == 2
    assert len(cache) == 0


def test_sliding_expiry_keeps_entries_that_are_read():
    clock, cache = make(ttl=10, sliding=True)
    cache.set("s", 1)
    clock.advance(8)
    assert cache.get("s") == 1
    assert cache.ttl_remaining("s") == 10
    clock.advance(10)
    assert cache.get("s") is None


def test_stats_and_get_or_set():
    _, cache = make()
    calls = []
    assert cache.get_or_set("k", lambda: calls.append(1) or "v") == "v"
    assert cache.get_or_set("k", lambda: calls.append(1) or "w") == "v"
    assert len(calls) == 1
    assert (cache.stats.hits, cache.stats.misses) == (1, 1)
    assert cache.stats.hit_rate == 0.5


def test_delete_and_clear():
    _, cache = make()
    cache.set("a", 1)
    assert cache.delete("a") and not cache.delete("a")
    cache.set("b", 2)
    cache.clear()
    assert len(cache) == 0


def test_invalid_arguments():
    with pytest.raises(ValueError, match="0"):
        TTLCache(maxsize=0)
    with pytest.raises(ValueError, match="-5"):
        TTLCache(ttl=-5)
    _, cache = make()
    with pytest.raises(ValueError, match="'10'"):
        cache.set("a", 1, ttl="10")
    with pytest.raises(KeyError):
        cache.ttl_remaining("missing")
