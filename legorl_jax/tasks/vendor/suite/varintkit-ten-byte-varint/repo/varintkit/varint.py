"""Unsigned base-128 varints (7 bits a byte, least significant group first, high bit = more)."""

from __future__ import annotations

from varintkit.errors import DecodeError

MAX_UINT64 = (1 << 64) - 1
MAX_VARINT_LEN64 = 10


def _check_uint64(value: int, what: str = "value") -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    if not 0 <= value <= MAX_UINT64:
        raise ValueError(f"{what} {value} is outside the unsigned 64-bit range")


def encode_uvarint(value: int) -> bytes:
    _check_uint64(value)
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def uvarint_size(value: int) -> int:
    """Encoded length in bytes, without encoding."""
    _check_uint64(value)
    return max(1, (value.bit_length() + 6) // 7)


def decode_uvarint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decodes one varint starting at pos; returns (value, position after it)."""
    if pos < 0 or pos > len(buf):
        raise ValueError(f"pos {pos} outside buffer of length {len(buf)}")
    start = pos
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise DecodeError("truncated varint", start)
        byte = buf[pos]
        pos += 1
        if shift == 63 and byte > 1:
            # The tenth byte may only carry bit 63.
            raise DecodeError("varint overflows 64 bits", start)
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 63:
            raise DecodeError("varint too long", start)


def encode_int64(value: int) -> bytes:
    """Signed 64-bit as two's complement uvarint (protobuf int64 wire form)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"value must be an int, got {type(value).__name__}")
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"value {value} is outside the signed 64-bit range")
    return encode_uvarint(value & MAX_UINT64)


def decode_int64(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    raw, pos = decode_uvarint(buf, pos)
    return (raw - (1 << 64) if raw >= (1 << 63) else raw), pos
