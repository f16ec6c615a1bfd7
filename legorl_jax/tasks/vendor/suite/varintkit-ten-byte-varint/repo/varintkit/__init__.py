"""varintkit: varint, zigzag and length-prefixed encodings."""

from varintkit.errors import DecodeError
from varintkit.stream import Reader, Writer
from varintkit.varint import (
    MAX_VARINT_LEN64,
    decode_int64,
    decode_uvarint,
    encode_int64,
    encode_uvarint,
    uvarint_size,
)
from varintkit.zigzag import decode_svarint, encode_svarint, zigzag_decode, zigzag_encode

__all__ = [
    "DecodeError",
    "MAX_VARINT_LEN64",
    "Reader",
    "Writer",
    "decode_int64",
    "decode_svarint",
    "decode_uvarint",
    "encode_int64",
    "encode_svarint",
    "encode_uvarint",
    "uvarint_size",
    "zigzag_decode",
    "zigzag_encode",
]
