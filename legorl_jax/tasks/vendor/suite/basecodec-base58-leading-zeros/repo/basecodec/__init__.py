"""basecodec: bytes and integers in base 58, 62, 36 and custom alphabets."""

from basecodec.alphabets import BASE36, BASE58_BITCOIN, BASE58_FLICKR, BASE62, Alphabet
from basecodec.base58 import b58decode, b58encode
from basecodec.check import ChecksumError, b58check_decode, b58check_encode
from basecodec.crockford import crockford_decode, crockford_encode
from basecodec.integers import decode_int, encode_int

__all__ = [
    "Alphabet",
    "BASE36",
    "BASE58_BITCOIN",
    "BASE58_FLICKR",
    "BASE62",
    "ChecksumError",
    "b58check_decode",
    "b58check_encode",
    "b58decode",
    "b58encode",
    "crockford_decode",
    "crockford_encode",
    "decode_int",
    "encode_int",
]
