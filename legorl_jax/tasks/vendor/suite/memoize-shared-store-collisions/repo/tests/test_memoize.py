import pytest

from memo import CacheInfo, MemoryStore, memoize


def test_results_are_reused_across_call_spellings():
    @memoize
    def area(width, height=1):
        area.calls += 1
        return width * height

    area.calls = 0
    assert area(3) == 3
    assert area(width=3) == 3
    assert area(3, height=1) == 3
    assert area.calls == 1
    assert area.cache_info() == CacheInfo(hits=2, misses=1, maxsize=128, currsize=1)


def test_typed_option():
    seen = []

    @memoize(typed=True)
    def kind(x):
        seen.append(x)
        return type(x).__name__

    assert kind(1) == "int" and kind(1.0) == "float"
    assert len(seen) == 2


def test_mutable_arguments_are_snapshotted():
    @memoize
    def total(values):
        return sum(values)

    data = [1, 2]
    assert total(data) == 3
    data.append(10)
    assert total(data) == 13


def test_invalidate_and_cache_clear():
    results = iter(range(100))

    @memoize
    def next_value(key):
        return next(results)

    first = next_value("a")
    assert next_value("a") == first
    assert next_value.invalidate(key="a")
    assert next_value("a") != first
    next_value.cache_clear()
    assert next_value.cache_info().currsize == 0


def test_private_store_respects_maxsize():
    @memoize(maxsize=2)
    def square(x):
        return x * x

    for x in (1, 2, 3):
        square(x)
    assert square.cache_info().currsize == 2


def test_shared_store_bounds_total_size_across_functions():
    shared = MemoryStore(maxsize=3)

    @memoize(store=shared)
    def price(sku):
        return sku * 10

    @memoize(store=shared)
    def stock(sku):
        return sku + 100

    price(1), price(2), stock(1), stock(2)
    assert len(shared) == 3
    assert price(2) == 20 and stock(1) == 101
    assert price.cache_info().currsize + stock.cache_info().currsize == 3


def test_bad_arguments():
    with pytest.raises(ValueError, match="0"):
        MemoryStore(maxsize=0)
    with pytest.raises(TypeError, match="dict"):
        memoize(lambda x: x, store={})
