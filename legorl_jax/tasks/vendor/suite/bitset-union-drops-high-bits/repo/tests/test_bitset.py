import pytest

from bitsets import Bitset


def test_members_across_words_iterate_in_order():
    bits = Bitset([1000, 5, 64, 63, 1])
    assert list(bits) == [1, 5, 63, 64, 1000]
    assert len(bits) == 5
    assert 64 in bits and 65 not in bits and -1 not in bits
    assert bits.max() == 1000


def test_discard_trims_top_words():
    bits = Bitset([3, 500])
    bits.discard(500)
    assert bits == Bitset([3])
    assert bits.max() == 3
    with pytest.raises(KeyError):
        bits.remove(500)


def test_set_algebra_within_one_word():
    a, b = Bitset([1, 2, 3, 10]), Bitset([3, 4, 10, 20])
    assert a | b == Bitset([1, 2, 3, 4, 10, 20])
    assert a & b == Bitset([3, 10])
    assert a - b == Bitset([1, 2])
    assert a ^ b == Bitset([1, 2, 4, 20])


def test_in_place_operators_mutate():
    a = Bitset([1, 2, 3])
    a |= Bitset([4])
    a -= Bitset([1])
    a &= Bitset([2, 4, 9])
    assert a == Bitset([2, 4])


def test_subset_comparisons():
    small, big = Bitset([2, 3]), Bitset([1, 2, 3])
    assert small <= big and small < big and big >= small
    assert not big <= small
    assert Bitset([1, 2]).isdisjoint(Bitset([3, 4]))


def test_int_round_trip():
    value = (1 << 130) | (1 << 64) | 0b1011
    bits = Bitset.from_int(value)
    assert list(bits) == [0, 1, 3, 64, 130]
    assert bits.to_int() == value


def test_ranges_round_trip():
    bits = Bitset([1, 2, 3, 7, 8, 20])
    assert bits.to_ranges() == [(1, 4), (7, 9), (20, 21)]
    assert Bitset.from_ranges(bits.to_ranges()) == bits


def test_invalid_members_are_rejected():
    with pytest.raises(ValueError, match="-3"):
        Bitset([-3])
    with pytest.raises(TypeError, match="str"):
        Bitset(["1"])
    with pytest.raises(TypeError, match="set"):
        Bitset([1]) | {2}
