import pytest

from memo import make_key
from memo.calls import CallNormalizer
from memo.keys import freeze


def test_containers_are_frozen_with_their_kind():
    assert freeze([1, 2]) != freeze((1, 2))
    assert freeze({"a": [1]}) == freeze({"a": [1]})
    assert freeze({1, 2}) != freeze(frozenset({1, 2}))
    hash(freeze({"x": {"y": [1, {2}]}}))


def test_typed_keys_distinguish_equal_values_of_different_types():
    assert make_key({"x": 1}) == make_key({"x": 1.0})
    assert make_key({"x": 1}, typed=True) != make_key({"x": 1.0}, typed=True)
    assert make_key({"x": [1]}, typed=True) != make_key({"x": [True]}, typed=True)


def test_unhashable_arguments_are_rejected():
    class Thing:
        __hash__ = None

    with pytest.raises(TypeError, match="unhashable Thing"):
        freeze(Thing())


def test_normalizer_fills_defaults_and_sorts_extra_keywords():
    def f(a, b=2, *rest, c=3, **extra):
        return None

    norm = CallNormalizer(f)
    assert norm.normalize((1,), {}) == norm.normalize((), {"a": 1, "b": 2})
    assert list(norm.normalize((1,), {"z": 1, "y": 2})["extra"]) == ["y", "z"]
