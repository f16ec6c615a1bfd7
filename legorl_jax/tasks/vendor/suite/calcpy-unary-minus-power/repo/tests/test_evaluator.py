import math

import pytest

from calcpy import EvaluationError, evaluate, parse, to_source


def test_arithmetic_follows_python():
    for expr in ("7 // 2", "-7 // 2", "7 % -3", "2 ** 10", "(1 + 2) * 3 - 4 / 8", "2 ** 3 ** 2", "(-2) ** 2"):
        assert evaluate(expr) == eval(expr)


def test_variables_and_functions():
    assert evaluate("sqrt(a * a + b * b)", {"a": 3, "b": 4}) == 5.0
    assert evaluate("round(pi, 3)") == 3.142
    assert evaluate("max(1, x, 3)", {"x": 7}) == 7


def test_negative_exponent():
    assert evaluate("2 ** -1") == 0.5


def test_errors_are_reported():
    with pytest.raises(EvaluationError, match="division by zero at position 2"):
        evaluate("1 / 0")
    with pytest.raises(EvaluationError, match="unknown variable 'y'"):
        evaluate("y + 1")
    with pytest.raises(EvaluationError, match="sqrt"):
        evaluate("sqrt(1, 2)")


def test_gaussian_at_zero():
    assert math.isclose(evaluate("exp(-x**2 / 2) / sqrt(2 * pi)", {"x": 0}), 1 / math.sqrt(2 * math.pi))


def test_printer_adds_only_needed_parentheses():
    assert to_source(parse("(a + b) * c")) == "(a + b) * c"
    assert to_source(parse("a - (b - c)")) == "a - (b - c)"
    assert to_source(parse("(a * b) * c")) == "a * b * c"
