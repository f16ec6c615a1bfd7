from fractions import Fraction

from cents import Money, allocate, split_evenly


def test_refund_split_three_ways_adds_up():
    parts = allocate(Money("-100.00", "USD"), [1, 1, 1])
    assert parts == [Money("-33.34", "USD"), Money("-33.33", "USD"), Money("-33.33", "USD")]


def test_negative_allocation_is_the_negated_positive_allocation():
    for amount, ratios in (("0.05", [3, 7]), ("1234.57", [2, 3, 5, 7, 11]), ("10.00", [1, 0, 2]),
                           ("0.01", [1, 1, 1]), ("999.99", [Fraction(1, 3), Fraction(2, 3)])):
        positive = allocate(Money(amount, "EUR"), ratios)
        negative = allocate(Money("-" + amount, "EUR"), ratios)
        assert negative == [-part for part in positive], (amount, ratios)


def test_negative_parts_always_add_up():
    for minor in (-1, -2, -7, -100, -12345, -99999):
        total = Money.from_minor(minor, "USD")
        for ratios in ([1, 1], [1, 1, 1], [1, 2, 3, 4], [5, 0, 3]):
            parts = allocate(total, ratios)
            assert sum(parts, Money(0, "USD")) == total, (minor, ratios)
            assert all(part.amount <= 0 for part in parts)


def test_split_evenly_of_negative_yen():
    assert split_evenly(Money(-1000, "JPY"), 3) == [Money(-334, "JPY"), Money(-333, "JPY"), Money(-333, "JPY")]


def test_zero_amount_splits_into_zeros():
    assert allocate(Money(0, "USD"), [1, 2]) == [Money(0, "USD"), Money(0, "USD")]
