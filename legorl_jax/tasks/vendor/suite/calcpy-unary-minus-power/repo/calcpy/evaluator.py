"""Evaluating a tree against variables and a fixed table of functions."""

from __future__ import annotations

import math
from collections.abc import Mapping

from calcpy.errors import EvaluationError
from calcpy.nodes import Binary, Call, Node, Num, Unary, Var
from calcpy.parser import parse

CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}
FUNCTIONS = {
    "abs": (abs, 1, 1),
    "sqrt": (math.sqrt, 1, 1),
    "exp": (math.exp, 1, 1),
    "log": (math.log, 1, 2),
    "min": (min, 1, None),
    "max": (max, 1, None),
    "round": (round, 1, 2),
    "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1),
}
_MAX_EXPONENT = 10_000


def _binary(node: Binary, left: float, right: float) -> float:
    op = node.op
    try:
        if op == "+":
            return left + right
        if op == "-":
            return left - right
        if op == "*":
            return left * right
        if op == "/":
            return left / right
        if op == "//":
            return left // right
        if op == "%":
            return left % right
        if op == "**":
            if abs(right) > _MAX_EXPONENT:
                raise EvaluationError(f"exponent {right} is too large", node.position)
            result = left**right
            if isinstance(result, complex):
                raise EvaluationError(f"{left} ** {right} has no real value", node.position)
            return result
    except ZeroDivisionError:
        raise EvaluationError("division by zero", node.position) from None
    except OverflowError:
        raise EvaluationError(f"result of {op!r} is too large", node.position) from None
    raise EvaluationError(f"unknown operator {op!r}", node.position)


def evaluate_tree(node: Node, variables: Mapping[str, float] | None = None) -> float:
    env = {**CONSTANTS, **(variables or {})}
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Var):
        if node.name not in env:
            raise EvaluationError(f"unknown variable {node.name!r}", node.position)
        return env[node.name]
    if isinstance(node, Unary):
        value = evaluate_tree(node.operand, variables)
        return -value if node.op == "-" else +value
    if isinstance(node, Binary):
        return _binary(node, evaluate_tree(node.left, variables), evaluate_tree(node.right, variables))
    if isinstance(node, Call):
        if node.name not in FUNCTIONS:
            raise EvaluationError(f"unknown function {node.name!r}", node.position)
        fn, lo, hi = FUNCTIONS[node.name]
        if len(node.args) < lo or (hi is not None and len(node.args) > hi):
            raise EvaluationError(f"{node.name}() takes {lo}..{hi or 'n'} arguments, got {len(node.args)}",
                                  node.position)
        args = [evaluate_tree(a, variables) for a in node.args]
        try:
            return fn(*args)
        except (ValueError, OverflowError) as exc:
            raise EvaluationError(f"{node.name}(): {exc}", node.position) from None
    raise TypeError(f"not an expression node: {node!r}")


def evaluate(text: str, variables: Mapping[str, float] | None = None) -> float:
    for name, value in (variables or {}).items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TypeError(f"variable {name!r} must be a number, got {value!r}")
    return evaluate_tree(parse(text), variables)
