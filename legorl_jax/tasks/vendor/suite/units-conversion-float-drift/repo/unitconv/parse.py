"""Parsing compound unit expressions: "kg*m^2/s^2" -> (factor to SI, Dimension).

Grammar: term (("*" | "/") term)*, where term = name ("^" int)?. Every term after the first "/" is
in the denominator ("J/kg/K" is J per (kg*K)), which is how people write units by hand.
"""

from __future__ import annotations

import re
from unitconv.dimension import Dimension

_TOKEN = re.compile(r"\s*(?:(?P<op>[*/])|(?P<name>[A-Za-z]+)(?:\^(?P<exp>-?\d+))?)")


def _terms(expression: str) -> list[tuple[str, int]]:
    if not isinstance(expression, str) or not expression.strip():
        raise ValueError(f"unit expression must be a non-empty string, got {expression!r}")
    terms: list[tuple[str, int]] = []
    pos, denominator, expect_term = 0, False, True
    text = expression.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise ValueError(f"cannot parse unit {expression!r} at position {pos}")
        pos = match.end()
        if match["op"]:
            if expect_term:
                raise ValueError(f"unit {expression!r}: operator {match['op']!r} without a unit before it")
            denominator = denominator or match["op"] == "/"
            expect_term = True
            continue
        if not expect_term:
            raise ValueError(f"unit {expression!r}: missing '*' or '/' before {match['name']!r}")
        exp = int(match["exp"]) if match["exp"] else 1
        terms.append((match["name"], -exp if denominator else exp))
        expect_term = False
    if expect_term:
        raise ValueError(f"unit {expression!r} ends with an operator")
    return terms


def parse_unit(expression: str, registry=None) -> tuple[float, Dimension]:
    if registry is None:
        from unitconv.registry import DEFAULT_REGISTRY as registry
    factor = 1.0
    dimension = Dimension()
    terms = _terms(expression)
    for name, exp in terms:
        unit = registry[name]
        if unit.offset and (len(terms) > 1 or exp != 1):
            raise ValueError(f"unit {name!r} has an offset and cannot be part of {expression!r}")
        factor *= unit.factor ** exp
        dimension = dimension * unit.dimension ** exp
    return factor, dimension
