import pytest

from cents import Money, format_money, parse_money


def test_format_with_symbol_and_grouping():
    assert format_money(Money("-1234.5", "EUR")) == "-€1,234.50"
    assert format_money(Money("1000000", "JPY")) == "¥1,000,000"
    assert format_money(Money("7", "KWD"), symbol=False) == "7.000 KWD"


def test_parse_round_trips_formatting():
    for money in (Money("1234.56", "USD"), Money("-0.99", "GBP"), Money("12", "CHF")):
        assert parse_money(format_money(money)) == money


def test_parse_with_explicit_currency_and_errors():
    assert parse_money("1,000", currency="JPY") == Money(1000, "JPY")
    with pytest.raises(ValueError, match="12,34"):
        parse_money("$12,34")
    with pytest.raises(ValueError, match="symbol"):
        parse_money("12.00")
