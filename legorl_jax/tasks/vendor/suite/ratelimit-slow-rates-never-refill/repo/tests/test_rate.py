import pytest

from throttle import Rate, parse_rate


def test_parses_units_and_counts():
    assert parse_rate("10/minute") == Rate(10, 60)
    assert parse_rate("5 per second") == Rate(5, 1)
    assert parse_rate("100/15m") == Rate(100, 900)
    assert parse_rate("1000/Day") == Rate(1000, 86400)


def test_whole_rates_per_second():
    assert parse_rate("5/s").per_second == 5
    assert parse_rate("120/minute").per_second == 2
    assert parse_rate("3600/h").per_second == 1


def test_interval_between_tokens():
    assert parse_rate("10/minute").interval == 6
    assert parse_rate("4/s").interval == 0.25


def test_rejects_malformed_rates():
    with pytest.raises(ValueError, match="'ten/minute'"):
        parse_rate("ten/minute")
    with pytest.raises(ValueError, match="'fortnight'"):
        parse_rate("1/fortnight")
    with pytest.raises(ValueError, match="positive"):
        Rate(0, 60)
    with pytest.raises(TypeError, match="int"):
        parse_rate(10)
