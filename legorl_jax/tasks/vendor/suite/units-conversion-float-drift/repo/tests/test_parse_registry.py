import pytest

from unitconv import DEFAULT_REGISTRY, Dimension, parse_unit


def test_denominator_collects_every_term_after_the_slash():
    _, dim = parse_unit("J/kg/K")
    assert dim == parse_unit("m^2/s^2/K")[1]
    assert str(dim) == "m^2*s^-2*K^-1"


def test_dimension_names():
    assert parse_unit("N")[1].describe() == "force"
    assert parse_unit("Pa")[1].describe() == "pressure"
    assert parse_unit("L")[1].describe() == "volume"
    assert Dimension().describe() == "dimensionless"


def test_offset_units_cannot_be_compounded():
    with pytest.raises(ValueError, match="offset"):
        parse_unit("degC/s")


def test_malformed_expressions():
    with pytest.raises(ValueError, match="ends with an operator"):
        parse_unit("m/")
    with pytest.raises(ValueError, match="missing"):
        parse_unit("m s")
    with pytest.raises(KeyError, match="'furlong'"):
        parse_unit("furlong")
    with pytest.raises(ValueError, match="non-empty"):
        parse_unit("")


def test_units_cannot_be_defined_twice():
    with pytest.raises(ValueError, match="'ft'"):
        DEFAULT_REGISTRY.define("ft", 1, "m")
    assert "kg" in DEFAULT_REGISTRY and "mg" in DEFAULT_REGISTRY
