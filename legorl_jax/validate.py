"""Checks of the commonest argument contracts, with one wording for their errors.

Contract: `positive_int(name, value)` and `positive_number(name, value)` return `value` when it is a
positive int (a positive int or float, finite, for numbers) and raise `ValueError` naming `name` and the
received value otherwise, e.g. `BlockSizes.num_warps must be a positive int, got 0`. A bool is never a
number here, though Python counts `True` as the int 1: a flag passed where a size belongs is a mistake.
`name` is the field as the caller's user knows it (`train.micro_batch_rows`, `save_hf: max_shard_bytes`).
"""

from __future__ import annotations

import math
from typing import Any


def is_int(value: Any) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(name: str, value: Any) -> int:
    """`value` if it is an int >= 1; else ValueError `{name} must be a positive int, got {value!r}`."""
    if not is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def positive_number(name: str, value: Any, *, unit: str = "") -> int | float:
    """`value` if it is a finite int or float > 0; else ValueError naming it (and `unit`, e.g. "seconds")."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        of_unit = f" of {unit}" if unit else ""
        raise ValueError(f"{name} must be a positive number{of_unit}, got {value!r}")
    return value
