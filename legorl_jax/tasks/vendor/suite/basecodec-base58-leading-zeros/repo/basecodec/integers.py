"""Non-negative integers to digit strings in any alphabet, and back."""

from __future__ import annotations

from basecodec.alphabets import BASE62, Alphabet


def encode_int(n: int, alphabet: Alphabet = BASE62, min_length: int = 0) -> str:
    """Most significant digit first; zero is one zero digit; left-padded to min_length."""
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"n must be an int, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    digits: list[str] = []
    while n:
        n, r = divmod(n, alphabet.base)
        digits.append(alphabet.chars[r])
    text = "".join(reversed(digits)) or alphabet.zero
    return text.rjust(min_length, alphabet.zero)


def decode_int(text: str, alphabet: Alphabet = BASE62) -> int:
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text:
        raise ValueError("cannot decode an empty string as an integer")
    n = 0
    for position, ch in enumerate(text):
        n = n * alphabet.base + alphabet.value(ch, position)
    return n
