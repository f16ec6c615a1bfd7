"""Exceptions and input checks shared by the stockroom modules."""

from __future__ import annotations

import re

_SKU = re.compile(r"^[A-Z0-9][A-Z0-9-]{0,31}$")


class InsufficientStock(Exception):
    def __init__(self, sku: str, wanted: int, available: int) -> None:
        super().__init__(f"cannot reserve {wanted} x {sku}: only {available} available")
        self.sku = sku
        self.wanted = wanted
        self.available = available


class OrderError(Exception):
    pass


def check_sku(sku: object) -> str:
    if not isinstance(sku, str) or not _SKU.match(sku):
        raise ValueError(f"SKU must be 1-32 upper-case letters, digits or dashes, got {sku!r}")
    return sku


def check_quantity(qty: object, allow_negative: bool = False) -> int:
    if isinstance(qty, bool) or not isinstance(qty, int):
        raise TypeError(f"quantity must be an int, got {qty!r}")
    if qty == 0 or (qty < 0 and not allow_negative):
        raise ValueError(f"quantity must be {'non-zero' if allow_negative else 'positive'}, got {qty}")
    return qty
