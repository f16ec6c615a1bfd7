import pytest

from varintkit import DecodeError, decode_uvarint, encode_uvarint, uvarint_size


@pytest.mark.parametrize(
    "value, encoded",
    [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"), (16384, b"\x80\x80\x01")],
    ids=["0", "1", "127", "128", "300", "16384"],
)
def test_known_encodings(value, encoded):
    assert encode_uvarint(value) == encoded
    assert decode_uvarint(encoded) == (value, len(encoded))


def test_round_trip_up_to_eight_bytes():
    for value in (2**21 - 1, 2**35 + 7, 2**56 - 1):
        data = encode_uvarint(value)
        assert len(data) == uvarint_size(value)
        assert decode_uvarint(data)[0] == value


def test_decode_from_position():
    data = b"\xff" + encode_uvarint(300) + b"\x05"
    assert decode_uvarint(data, 1) == (300, 3)


def test_truncated_varint_reports_start_offset():
    with pytest.raises(DecodeError, match="truncated varint at offset 2"):
        decode_uvarint(b"\x00\x01\x80\x80", 2)


def test_out_of_range_values_rejected():
    with pytest.raises(ValueError, match="outside the unsigned 64-bit range"):
        encode_uvarint(-1)
    with pytest.raises(TypeError):
        encode_uvarint(1.5)
