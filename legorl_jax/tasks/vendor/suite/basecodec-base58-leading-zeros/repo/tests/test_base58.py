import pytest

from basecodec import BASE58_FLICKR, b58decode, b58encode


def test_known_vector():
    assert b58encode(b"hello world") == "StV1DL6CwTryKyV"
    assert b58decode("StV1DL6CwTryKyV") == b"hello world"


def test_round_trip_of_assorted_bytes():
    for data in (b"\x01", b"\xff\xfe\xfd", bytes(range(1, 200)), b"\x80" + bytes(31)):
        assert b58decode(b58encode(data)) == data


def test_empty_input():
    assert b58encode(b"") == ""
    assert b58decode("") == b""


def test_flickr_alphabet_differs():
    assert b58encode(b"hello world", BASE58_FLICKR) != b58encode(b"hello world")
    assert b58decode(b58encode(b"abc", BASE58_FLICKR), BASE58_FLICKR) == b"abc"


def test_invalid_characters_are_reported():
    with pytest.raises(ValueError, match="character '0' at position 2"):
        b58decode("ab0c")
    with pytest.raises(TypeError, match="encode the text first"):
        b58encode("text")
