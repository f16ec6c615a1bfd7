from memo import MemoryStore, memoize


def make_scaler(factor, store):
    @memoize(store=store)
    def scale(x):
        return x * factor

    return scale


def test_closures_from_one_factory_keep_their_own_results():
    shared = MemoryStore()
    double, triple = make_scaler(2, shared), make_scaler(3, shared)
    assert double(5) == 10
    assert triple(5) == 15
    assert double(5) == 10


def test_lambdas_sharing_a_store_do_not_see_each_other():
    shared = MemoryStore()
    inc = memoize(lambda x: x + 1, store=shared)
    neg = memoize(lambda x: -x, store=shared)
    assert inc(1) == 2
    assert neg(1) == -1
    assert inc(1) == 2


def test_redefined_function_gets_a_fresh_cache():
    shared = MemoryStore()

    @memoize(store=shared)
    def greeting(name):
        return f"hello {name}"

    old = greeting

    @memoize(store=shared)
    def greeting(name):  # noqa: F811 - redefinition is the point
        return f"hi {name}"

    assert old("ann") == "hello ann"
    assert greeting("ann") == "hi ann"


def test_cache_clear_and_info_only_concern_their_own_function():
    shared = MemoryStore()
    double, triple = make_scaler(2, shared), make_scaler(3, shared)
    double(1), double(2), triple(1)
    assert double.cache_info().currsize == 2
    assert triple.cache_info().currsize == 1
    double.cache_clear()
    assert triple.cache_info().currsize == 1
    assert len(shared) == 1
    assert triple(1) == 3
    assert triple.cache_info().hits == 1


def test_invalidate_only_concerns_its_own_function():
    shared = MemoryStore()
    double, triple = make_scaler(2, shared), make_scaler(3, shared)
    triple(4)
    assert not double.invalidate(4)
    assert triple.cache_info().currsize == 1


def test_differently_named_functions_in_a_shared_store_stay_separate():
    shared = MemoryStore()

    @memoize(store=shared)
    def price(sku):
        return sku * 10

    @memoize(store=shared)
    def stock(sku):
        return sku + 100

    assert (price(1), stock(1), price(1)) == (10, 101, 10)
