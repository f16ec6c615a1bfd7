from ttlcache import ManualClock, TTLCache


def make(**kwargs):
    clock = ManualClock()
    return clock, TTLCache(clock=clock, **kwargs)


def test_refreshed_entry_outlives_its_first_deadline():
    clock, cache = make(maxsize=10, ttl=10)
    cache.set("session", "v1")
    clock.advance(5)
    cache.set("session", "v2", ttl=60)
    clock.advance(6)
    assert cache.purge() == 0
    assert len(cache) == 1
    assert cache.get("session") == "v2"
    clock.advance(60)
    assert cache.get("session") is None


def test_sliding_entry_in_use_survives_purge():
    clock, cache = make(maxsize=10, ttl=10, sliding=True)
    cache.set("hot", 1)
    for _ in range(5):
        clock.advance(8)
        assert cache.get("hot") == 1
        assert cache.keys() == ["hot"]
    assert cache.stats.expirations == 0


def test_entry_replaced_without_ttl_never_expires():
    clock, cache = make(maxsize=10)
    cache.set("cfg", "temporary", ttl=5)
    cache.set("cfg", "permanent", ttl=None)
    clock.advance(100)
    assert len(cache) == 1
    assert cache.get("cfg") == "permanent"


def test_deleted_and_re_added_key_is_not_removed_by_the_old_deadline():
    clock, cache = make(maxsize=10)
    cache.set("k", "old", ttl=5)
    cache.delete("k")
    cache.set("k", "new")
    clock.advance(6)
    assert cache.keys() == ["k"]
    assert cache.get("k") == "new"


def test_full_cache_evicts_lru_instead_of_a_refreshed_entry():
    clock, cache = make(maxsize=2)
    cache.set("a", 1, ttl=5)
    cache.set("b", 2, ttl=None)
    clock.advance(3)
    cache.set("a", 10, ttl=100)
    clock.advance(3)
    cache.set("c", 3)
    assert cache.keys() == ["a", "c"]
    assert cache.get("a") == 10
    assert cache.stats.evictions == 1
    assert cache.stats.expirations == 0


def test_really_expired_entries_are_still_purged():
    clock, cache = make(maxsize=10)
    cache.set("x", 1, ttl=5)
    cache.set("x", 2, ttl=7)
    clock.advance(7)
    assert cache.purge() == 1
    assert len(cache) == 0
