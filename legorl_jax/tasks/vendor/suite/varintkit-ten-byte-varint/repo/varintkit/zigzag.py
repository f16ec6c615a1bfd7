"""Zigzag mapping of signed to unsigned integers: 0, -1, 1, -2, ... -> 0, 1, 2, 3, ..."""

from __future__ import annotations

from varintkit.varint import decode_uvarint, encode_uvarint

_MIN_INT64 = -(1 << 63)
_MAX_INT64 = (1 << 63) - 1


def zigzag_encode(value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"value must be an int, got {type(value).__name__}")
    if not _MIN_INT64 <= value <= _MAX_INT64:
        raise ValueError(f"value {value} is outside the signed 64-bit range")
    # Python ints are unbounded, so the arithmetic shift of the sign is written out: 2n or -2n-1.
    return value << 1 if value >= 0 else ((-value) << 1) - 1


def zigzag_decode(value: int) -> int:
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"zigzag value must be a non-negative int, got {value!r}")
    return (value >> 1) ^ -(value & 1)


def encode_svarint(value: int) -> bytes:
    return encode_uvarint(zigzag_encode(value))


def decode_svarint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    raw, pos = decode_uvarint(buf, pos)
    return zigzag_decode(raw), pos
