"""The expression tree."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Num:
    value: float | int


@dataclass(frozen=True)
class Var:
    name: str
    position: int = 0


@dataclass(frozen=True)
class Unary:
    op: str  # '+' or '-'
    operand: "Node"


@dataclass(frozen=True)
class Binary:
    op: str  # + - * / // % **
    left: "Node"
    right: "Node"
    position: int = 0


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple["Node", ...]
    position: int = 0


Node = Num | Var | Unary | Binary | Call
