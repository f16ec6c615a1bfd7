import pytest

from varintkit import DecodeError, Reader, Writer, decode_svarint, encode_svarint, zigzag_decode, zigzag_encode


def test_zigzag_interleaves_signs():
    assert [zigzag_encode(v) for v in (0, -1, 1, -2, 2)] == [0, 1, 2, 3, 4]
    assert [zigzag_decode(v) for v in (0, 1, 2, 3, 4)] == [0, -1, 1, -2, 2]


def test_small_negative_svarint_is_one_byte():
    assert encode_svarint(-64) == b"\x7f"
    assert decode_svarint(encode_svarint(-123456)) == (-123456, 3)


def test_stream_round_trip_of_mixed_fields():
    w = Writer()
    w.write_uvarint(300)
    w.write_svarint(-2)
    w.write_string("héllo")
    w.write_fixed32(0xDEADBEEF)
    w.write_double(2.5)
    w.write_int64(42)
    r = Reader(w.getvalue())
    got = (r.read_uvarint(), r.read_svarint(), r.read_string(), r.read_fixed32(), r.read_double(), r.read_int64())
    assert got == (300, -2, "héllo", 0xDEADBEEF, 2.5, 42)
    assert r.remaining == 0


def test_length_prefix_past_end_is_an_error():
    with pytest.raises(DecodeError, match="runs past the end at offset 0"):
        Reader(b"\x05abc").read_bytes()


def test_invalid_utf8_string_is_an_error():
    with pytest.raises(DecodeError, match="invalid UTF-8"):
        Reader(b"\x02\xc3\x28").read_string()
