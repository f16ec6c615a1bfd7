import pytest

from basecodec import crockford_decode, crockford_encode


def test_grouped_encoding_with_check_symbol():
    assert crockford_encode(1234567, checksum=True, group=3) == "15-NM7S"
    assert crockford_decode("15-NM7S", checksum=True) == 1234567


def test_decoding_forgives_case_and_confusable_letters():
    assert crockford_decode("1o") == crockford_decode("10") == 32
    assert crockford_decode("il") == 33


def test_wrong_check_symbol_is_rejected():
    with pytest.raises(ValueError, match="check symbol mismatch"):
        crockford_decode("15-NM7T", checksum=True)
