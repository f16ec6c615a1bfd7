import pytest

from bitsets import Bitset, FlagSet


def test_union_keeps_members_of_the_larger_set():
    small, large = Bitset([1, 2]), Bitset([3, 100, 5000])
    assert list(small | large) == [1, 2, 3, 100, 5000]
    assert list(large | small) == [1, 2, 3, 100, 5000]
    assert small.union(Bitset([70]), Bitset([7000])) == Bitset([1, 2, 70, 7000])


def test_in_place_union_and_difference_with_different_sizes():
    acc = Bitset([1])
    acc |= Bitset([64, 128])
    assert list(acc) == [1, 64, 128]
    acc -= Bitset([1])
    assert list(acc) == [64, 128]


def test_difference_and_xor_keep_the_high_words():
    a = Bitset([1, 200, 300])
    assert list(a - Bitset([1])) == [200, 300]
    assert list(a ^ Bitset([1, 2])) == [2, 200, 300]
    assert list(Bitset([2]) ^ a) == [1, 2, 200, 300]


def test_subset_checks_look_at_every_word():
    assert not Bitset([1, 100]) <= Bitset([1])
    assert not Bitset([500]) < Bitset([1, 2])
    assert Bitset([1]) <= Bitset([1, 100])


def test_decode_rejects_high_unknown_bits():
    perms = FlagSet(["read", "write", "admin"])
    with pytest.raises(ValueError, match="outside the flag set"):
        perms.decode((1 << 70) | 1)


def test_intersection_with_different_sizes():
    assert Bitset([1, 64, 900]) & Bitset([64]) == Bitset([64])
