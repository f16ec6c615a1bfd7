from decimal import Decimal

import pytest

from cents import CurrencyMismatch, Money


def test_amounts_are_rounded_half_up_to_the_minor_unit():
    assert Money("2.345", "USD").amount == Decimal("2.35")
    assert Money("2.344", "USD").amount == Decimal("2.34")
    assert Money("-2.345", "USD").amount == Decimal("-2.35")
    assert Money("1234.5", "JPY").amount == Decimal("1235")
    assert Money("1.0005", "KWD").amount == Decimal("1.001")


def test_minor_units_round_trip():
    assert Money("12.34", "usd").minor == 1234
    assert Money.from_minor(-705, "EUR") == Money("-7.05", "EUR")
    assert Money.from_minor(5000, "JPY") == Money(5000, "JPY")


def test_arithmetic_and_ordering():
    a, b = Money("10.10", "EUR"), Money("0.95", "EUR")
    assert a + b == Money("11.05", "EUR")
    assert a - b == Money("9.15", "EUR")
    assert -a == Money("-10.10", "EUR")
    assert b * "0.175" == Money("0.17", "EUR")
    assert 3 * b == Money("2.85", "EUR")
    assert sorted([a, b]) == [b, a]


def test_mixing_currencies_is_an_error():
    with pytest.raises(CurrencyMismatch, match="USD and EUR"):
        Money(1, "USD") + Money(1, "EUR")


def test_floats_and_garbage_are_rejected():
    with pytest.raises(TypeError, match="0.1"):
        Money(0.1, "USD")
    with pytest.raises(ValueError, match="'ten'"):
        Money("ten", "USD")
    with pytest.raises(ValueError, match="'XYZ'"):
        Money(1, "XYZ")
