import pytest

from basecodec import BASE36, BASE62, ChecksumError, b58check_decode, b58check_encode, decode_int, encode_int


def test_check_round_trip_with_script_version():
    payload = b"\x05" + bytes(range(20))
    text = b58check_encode(payload)
    assert text.startswith("3")
    assert b58check_decode(text) == payload


def test_corrupted_text_fails_checksum():
    text = b58check_encode(b"\x6f" + b"\x11" * 20)
    corrupted = text[:-1] + ("2" if text[-1] != "2" else "3")
    with pytest.raises(ChecksumError, match="checksum mismatch"):
        b58check_decode(corrupted)


def test_integers_in_base62_and_base36():
    assert encode_int(0) == "0"
    assert encode_int(61) == "z"
    assert decode_int(encode_int(123456789, BASE62), BASE62) == 123456789
    assert decode_int("zz", BASE36) == 35 * 36 + 35
    assert encode_int(5, BASE36, min_length=4) == "0005"


def test_integer_errors():
    with pytest.raises(ValueError, match="non-negative"):
        encode_int(-1)
    with pytest.raises(ValueError, match="empty"):
        decode_int("")
