import pytest

from basecodec import BASE58_FLICKR, b58check_decode, b58check_encode, b58decode, b58encode


@pytest.mark.parametrize(
    "data, text",
    [(b"\x00", "1"), (b"\x00\x00", "11"), (b"\x00\x00\x00\x01", "1112"), (b"\x00\xff", "15Q")],
    ids=["one-zero", "two-zeros", "zeros-then-one", "zero-then-ff"],
)
def test_each_leading_zero_byte_is_a_one(data, text):
    assert b58encode(data) == text
    assert b58decode(text) == data


def test_round_trip_preserves_leading_zeros():
    for data in (bytes(5), b"\x00\x00hello", bytes(1) + bytes(range(1, 40))):
        assert b58decode(b58encode(data)) == data


def test_mainnet_burn_address():
    payload = b"\x00" + bytes(20)
    assert b58check_encode(payload) == "1111111111111111111114oLvT2"
    assert b58check_decode("1111111111111111111114oLvT2") == payload


def test_version_zero_address_round_trip():
    payload = b"\x00" + bytes(range(100, 120))
    text = b58check_encode(payload)
    assert text.startswith("1")
    assert b58check_decode(text) == payload


def test_other_alphabet_uses_its_own_zero_digit():
    assert b58encode(b"\x00\x00\x07", BASE58_FLICKR) == "118"
    assert b58decode("118", BASE58_FLICKR) == b"\x00\x00\x07"
