"""StockLedger: the append-only list of stock movements; on-hand quantities derive from it.

Movements are never edited or deleted; a mistake is corrected with an adjustment. Quantities are
signed: receipts positive, shipments negative, adjustments either.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from stockroom.errors import check_quantity, check_sku

KINDS = ("receipt", "shipment", "adjustment")


@dataclass(frozen=True)
class Movement:
    sku: str
    qty: int
    kind: str
    reference: str = ""


class StockLedger:
    def __init__(self) -> None:
        self._movements: list[Movement] = []
        self._on_hand: defaultdict[str, int] = defaultdict(int)

    def record(self, sku: str, qty: int, kind: str, reference: str = "") -> Movement:
        check_sku(sku)
        check_quantity(qty, allow_negative=True)
        if kind not in KINDS:
            raise ValueError(f"movement kind must be one of {KINDS}, got {kind!r}")
        if kind == "receipt" and qty < 0 or kind == "shipment" and qty > 0:
            raise ValueError(f"a {kind} cannot have quantity {qty}")
        if self.on_hand(sku) + qty < 0:
            raise ValueError(f"{kind} of {qty} x {sku} would leave {self.on_hand(sku) + qty} on hand")
        movement = Movement(sku, qty, kind, reference)
        self._movements.append(movement)
        self._on_hand[sku] += qty
        return movement

    def on_hand(self, sku: str) -> int:
        return self._on_hand.get(sku, 0)

    def skus(self) -> list[str]:
        return sorted({m.sku for m in self._movements})

    def movements(self, sku: str | None = None) -> list[Movement]:
        return [m for m in self._movements if sku is None or m.sku == sku]
