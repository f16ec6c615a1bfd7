import pytest

from cents import Money, allocate, split_evenly


def test_even_split_gives_leftover_cent_to_first_part():
    parts = allocate(Money("100.00", "USD"), [1, 1, 1])
    assert parts == [Money("33.34", "USD"), Money("33.33", "USD"), Money("33.33", "USD")]


def test_leftover_goes_to_largest_remainders():
    parts = allocate(Money("0.05", "USD"), [3, 7])
    assert parts == [Money("0.02", "USD"), Money("0.03", "USD")]
    parts = allocate(Money("10.00", "USD"), [1, 2, 2])
    assert parts == [Money("2.00", "USD"), Money("4.00", "USD"), Money("4.00", "USD")]


def test_parts_always_add_up():
    total = Money("1234.57", "EUR")
    for ratios in ([1, 1, 1, 1, 1, 1, 1], [5, 0, 3], [2, 3, 5, 7, 11]):
        assert sum(allocate(total, ratios), Money(0, "EUR")) == total


def test_zero_decimal_currency():
    assert split_evenly(Money(1000, "JPY"), 3) == [Money(334, "JPY"), Money(333, "JPY"), Money(333, "JPY")]


def test_bad_ratios():
    with pytest.raises(ValueError, match="-1"):
        allocate(Money(1, "USD"), [1, -1])
    with pytest.raises(ValueError, match="all be zero"):
        allocate(Money(1, "USD"), [0, 0])
    with pytest.raises(ValueError, match="0"):
        split_evenly(Money(1, "USD"), 0)
