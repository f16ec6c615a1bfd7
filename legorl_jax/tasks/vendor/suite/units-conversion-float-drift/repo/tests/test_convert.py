import pytest

from unitconv import DimensionError, Quantity, convert


def test_readme_examples():
    assert convert(60, "mi/h", "ft/s") == pytest.approx(88)
    assert Quantity(3, "kg*m/s^2").to("N").value == pytest.approx(3)


def test_metric_prefixes():
    assert convert(1, "km", "m") == 1000
    assert convert(1, "mm", "m") == 0.001
    assert convert(2.5, "kg", "g") == 2500
    assert convert(1, "h", "s") == 3600


def test_us_customary_units():
    assert convert(1, "yd", "in") == pytest.approx(36)
    assert convert(3, "mi", "ft") == pytest.approx(15840)
    assert convert(1, "lb", "oz") == pytest.approx(16)
    assert convert(1, "in", "cm") == pytest.approx(2.54)


def test_compound_units():
    assert convert(36, "km/h", "m/s") == pytest.approx(10)
    assert convert(1, "kWh", "J") == pytest.approx(3.6e6)
    assert convert(1, "bar", "Pa") == pytest.approx(1e5)
    assert convert(1, "J/kg/K", "m^2/s^2/K") == pytest.approx(1)


def test_temperatures():
    assert convert(0, "degC", "K") == pytest.approx(273.15)
    assert convert(32, "degF", "degC") == pytest.approx(0)
    assert convert(-40, "degC", "degF") == pytest.approx(-40)


def test_dimension_mismatch_is_reported():
    with pytest.raises(DimensionError, match="length.*time"):
        convert(1, "m", "s")
    with pytest.raises(DimensionError, match="velocity"):
        convert(1, "m/s", "m/s^2")


def test_quantity_arithmetic_and_comparison():
    total = Quantity(1, "km") + Quantity(500, "m")
    assert total.unit == "km" and total.value == pytest.approx(1.5)
    assert Quantity(1, "mi") > Quantity(1, "km")
    assert Quantity(2, "h") == Quantity(120, "min")
    assert Quantity(1, "m") != Quantity(1, "s")
