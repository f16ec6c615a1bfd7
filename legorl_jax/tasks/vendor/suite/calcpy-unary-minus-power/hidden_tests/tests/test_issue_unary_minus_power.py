import math

import pytest

from calcpy import evaluate, parse, to_source
from calcpy.nodes import Binary, Num, Unary


@pytest.mark.parametrize(
    "expr",
    ["-2 ** 2", "-2 ** 0.5", "- 3 ** 2 + 1", "10 - -2 ** 2", "-(2) ** 2", "+-2 ** 2", "2 * -3 ** 2", "-2 ** -2"],
    ids=["neg-square", "neg-sqrt", "spaced-sign", "minus-neg", "paren-base", "double-sign", "times-neg", "neg-exp"],
)
def test_unary_minus_binds_looser_than_power_like_python(expr):
    assert evaluate(expr) == eval(expr)


def test_negated_power_tree_shape():
    assert parse("-2 ** 2") == Unary("-", Binary("**", Num(2), Num(2), 3))


def test_gaussian_with_variable():
    x = 1.5
    got = evaluate("exp(-x**2 / 2) / sqrt(2 * pi)", {"x": x})
    assert math.isclose(got, math.exp(-(x**2) / 2) / math.sqrt(2 * math.pi))


def test_printed_source_round_trips():
    for text in ("-2 ** 2", "(-2) ** 2", "-x ** -y", "2 ** -3 ** 2"):
        tree = parse(text)
        assert parse(to_source(tree)) == tree
        assert evaluate(to_source(tree), {"x": 2, "y": 1}) == eval(text, {"x": 2, "y": 1})


def test_parenthesised_negative_base_and_exponents_unchanged():
    assert evaluate("(-2) ** 2") == 4
    assert evaluate("2 ** -1") == 0.5
    assert evaluate("2 ** 3 ** 2") == 512
