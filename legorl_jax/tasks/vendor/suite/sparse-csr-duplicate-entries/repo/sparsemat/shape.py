"""Validation of shapes, indices and dense inputs shared by both formats."""

from __future__ import annotations

from collections.abc import Sequence


def check_shape(shape: object) -> tuple[int, int]:
    if (not isinstance(shape, tuple) or len(shape) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
        raise ValueError(f"shape must be a pair of non-negative ints, got {shape!r}")
    return shape


def check_index(shape: tuple[int, int], row: int, col: int) -> None:
    for name, value, size in (("row", row, shape[0]), ("col", col, shape[1])):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} index must be int, got {type(value).__name__}")
        if not 0 <= value < size:
            raise IndexError(f"{name} index {value} out of range for shape {shape}")


def check_dense(rows: Sequence[Sequence[float]]) -> tuple[int, int]:
    """Shape of a list-of-lists matrix; every row must have the same length."""
    if not rows:
        return (0, 0)
    width = len(rows[0])
    for i, row in enumerate(rows):
        if len(row) != width:
            raise ValueError(f"dense row {i} has {len(row)} columns, expected {width}")
    return (len(rows), width)


def check_vector(vector: Sequence[float], length: int) -> None:
    if len(vector) != length:
        raise ValueError(f"vector of length {len(vector)} does not match {length} columns")
