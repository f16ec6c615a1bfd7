from fractions import Fraction

from unitconv import Quantity, convert

INCH = Fraction("0.0254")
POUND = Fraction("0.45359237")


def test_exactly_related_lengths_convert_exactly():
    assert convert(1, "ft", "in") == 12.0
    assert convert(1, "mi", "in") == 63360.0
    assert convert(1, "ft", "cm") == 30.48
    assert convert(1, "mi", "km") == 1.609344
    assert convert(1, "ft^2", "in^2") == 144.0


def test_metric_volumes_and_masses_convert_exactly():
    assert convert(1, "L", "cm^3") == 1000.0
    assert convert(1, "g", "mg") == 1000.0
    assert convert(1, "gal", "L") == 3.785411784
    assert convert(250, "mL", "L") == 0.25


def test_temperature_scales_convert_exactly():
    assert convert(100, "degC", "degF") == 212.0
    assert convert(212, "degF", "degC") == 100.0
    assert convert(37, "degC", "degF") == 98.6
    assert convert(0, "K", "degF") == -459.67


def test_inexact_results_are_rounded_once():
    assert convert(1, "kg", "lb") == float(1 / POUND)
    assert convert(5, "km", "mi") == float(5000 / (INCH * 12 * 5280))
    assert convert(1, "m", "in") == float(1 / INCH)
    assert convert(0.1, "m", "cm") == float(Fraction(0.1) * 100)
    assert convert(1, "kcal", "kWh") == float(Fraction(4184, 3600000))


def test_quantities_in_exactly_related_units_compare_equal():
    assert Quantity(1, "ft") == Quantity(12, "in")
    assert hash(Quantity(1, "ft")) == hash(Quantity(12, "in"))
    total = Quantity(1, "ft") + Quantity(6, "in")
    assert total.value == 1.5
    assert Quantity(1, "L").to("cm^3").value == 1000.0
