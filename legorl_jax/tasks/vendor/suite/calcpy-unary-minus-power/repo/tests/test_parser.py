import pytest

from calcpy import ParseError, parse
from calcpy.nodes import Binary, Call, Num, Unary, Var


def test_multiplication_binds_tighter_than_addition():
    assert parse("1 + 2 * 3") == Binary("+", Num(1), Binary("*", Num(2), Num(3), 6), 2)


def test_power_is_right_associative():
    tree = parse("2 ** 3 ** 2")
    assert isinstance(tree.right, Binary) and tree.right.op == "**"


def test_unary_minus_and_calls():
    assert parse("-x") == Unary("-", Var("x", 1))
    assert parse("max(1, 2)") == Call("max", (Num(1), Num(2)), 0)


def test_float_literals():
    assert parse("1.5e3") == Num(1500.0)
    assert parse(".5") == Num(0.5)


@pytest.mark.parametrize(
    "text, where",
    [("1 +", 3), ("(1", 2), ("1 $ 2", 2), ("2 3", 2)],
    ids=["dangling-op", "unclosed", "bad-char", "two-numbers"],
)
def test_syntax_errors_report_position(text, where):
    with pytest.raises(ParseError, match=f"at position {where}"):
        parse(text)
