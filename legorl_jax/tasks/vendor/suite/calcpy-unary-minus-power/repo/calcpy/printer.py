"""Turning a tree back into source text with only the parentheses it needs."""

from __future__ import annotations

from calcpy.nodes import Binary, Call, Node, Num, Unary, Var

# Binding strength, as documented in the README (higher binds tighter).
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "//": 2, "%": 2, "unary": 3, "**": 4}
_ATOM = 5


def _strength(node: Node) -> int:
    if isinstance(node, Binary):
        return _PRECEDENCE[node.op]
    if isinstance(node, Unary):
        return _PRECEDENCE["unary"]
    return _ATOM


def _wrap(node: Node, needed: int) -> str:
    text = to_source(node)
    return f"({text})" if _strength(node) < needed else text


def to_source(node: Node) -> str:
    if isinstance(node, Num):
        return repr(node.value)
    if isinstance(node, Var):
        return node.name
    if isinstance(node, Call):
        return f"{node.name}({', '.join(to_source(a) for a in node.args)})"
    if isinstance(node, Unary):
        return node.op + _wrap(node.operand, _PRECEDENCE["unary"])
    if isinstance(node, Binary):
        p = _PRECEDENCE[node.op]
        if node.op == "**":
            # Right-associative, and a unary minus may stand in the exponent without parentheses.
            left, right = _wrap(node.left, p + 1), _wrap(node.right, _PRECEDENCE["unary"])
        else:
            left, right = _wrap(node.left, p), _wrap(node.right, p + 1)
        return f"{left} {node.op} {right}"
    raise TypeError(f"not an expression node: {node!r}")
