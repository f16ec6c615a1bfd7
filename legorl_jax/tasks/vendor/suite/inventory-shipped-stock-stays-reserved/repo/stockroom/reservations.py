"""ReservationBook: units promised to orders, per order and per SKU.

The book only records promises; it does not know what is on hand (the Warehouse checks
availability before reserving).
"""

from __future__ import annotations

from collections import defaultdict

from stockroom.errors import check_quantity, check_sku


class ReservationBook:
    def __init__(self) -> None:
        self._by_order: dict[str, dict[str, int]] = {}
        self._by_sku: defaultdict[str, int] = defaultdict(int)

    def reserve(self, order_id: str, sku: str, qty: int) -> None:
        check_sku(sku)
        check_quantity(qty)
        lines = self._by_order.setdefault(order_id, {})
        lines[sku] = lines.get(sku, 0) + qty
        self._by_sku[sku] += qty

    def release(self, order_id: str) -> dict[str, int]:
        """Drops every reservation of an order; returns what was released."""
        lines = self._by_order.pop(order_id, {})
        for sku, qty in lines.items():
            self._by_sku[sku] -= qty
        return lines

    def reserved(self, sku: str) -> int:
        return self._by_sku.get(sku, 0)

    def lines(self, order_id: str) -> dict[str, int]:
        return dict(self._by_order.get(order_id, {}))

    def orders(self) -> list[str]:
        return sorted(self._by_order)
