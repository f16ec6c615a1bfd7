import pytest

from varintkit import (
    DecodeError,
    Reader,
    Writer,
    decode_int64,
    decode_svarint,
    decode_uvarint,
    encode_int64,
    encode_svarint,
    encode_uvarint,
)


def test_negative_int64_round_trips():
    data = encode_int64(-1)
    assert data == b"\xff" * 9 + b"\x01"
    assert decode_int64(data) == (-1, 10)
    assert decode_int64(encode_int64(-(2**63))) == (-(2**63), 10)


@pytest.mark.parametrize("value", [2**63, 2**63 + 12345, 2**64 - 1])
def test_uvarints_needing_ten_bytes_decode(value):
    data = encode_uvarint(value)
    assert len(data) == 10
    assert decode_uvarint(data) == (value, 10)


def test_extreme_zigzag_values_round_trip():
    for value in (2**63 - 1, -(2**63)):
        assert decode_svarint(encode_svarint(value)) == (value, 10)


def test_stream_with_negative_int64_field():
    w = Writer()
    w.write_int64(-42)
    w.write_uvarint(7)
    r = Reader(w.getvalue())
    assert (r.read_int64(), r.read_uvarint()) == (-42, 7)


def test_eleven_byte_varint_is_still_rejected():
    with pytest.raises(DecodeError):
        decode_uvarint(b"\xff" * 10 + b"\x01")


def test_tenth_byte_above_bit_63_is_an_overflow():
    with pytest.raises(DecodeError, match="overflows"):
        decode_uvarint(b"\xff" * 9 + b"\x02")
