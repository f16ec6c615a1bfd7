import pytest

from bitsets import FlagSet


def test_encode_decode_round_trip():
    perms = FlagSet(["read", "write", "admin"])
    mask = perms.encode({"read", "admin"})
    assert mask == 0b101
    assert perms.decode(mask) == {"read", "admin"}
    assert perms.all() == 0b111


def test_unknown_flags_and_bits_are_errors():
    perms = FlagSet(["read", "write", "admin"])
    with pytest.raises(ValueError, match="'delete'"):
        perms.encode(["delete"])
    with pytest.raises(ValueError, match=r"\[3\]"):
        perms.decode(0b1001)


def test_duplicate_names_are_rejected():
    with pytest.raises(ValueError, match="unique"):
        FlagSet(["a", "a"])
