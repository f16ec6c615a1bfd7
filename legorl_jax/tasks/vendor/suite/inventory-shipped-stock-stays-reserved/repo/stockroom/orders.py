"""Order: the lines a customer asked for and what has shipped so far."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from stockroom.errors import OrderError


class OrderStatus(enum.Enum):
    PLACED = "placed"
    PARTIALLY_SHIPPED = "partially shipped"
    SHIPPED = "shipped"
    CANCELLED = "cancelled"


@dataclass
class Order:
    order_id: str
    lines: dict[str, int]
    shipped: dict[str, int] = field(default_factory=dict)
    status: OrderStatus = OrderStatus.PLACED

    def outstanding(self) -> dict[str, int]:
        """Quantities ordered but not shipped yet."""
        out = {}
        for sku, qty in self.lines.items():
            left = qty - self.shipped.get(sku, 0)
            if left:
                out[sku] = left
        return out

    def check_open(self, action: str) -> None:
        if self.status in (OrderStatus.SHIPPED, OrderStatus.CANCELLED):
            raise OrderError(f"cannot {action} order {self.order_id!r}: it is {self.status.value}")

    def record_shipment(self, lines: dict[str, int]) -> None:
        outstanding = self.outstanding()
        for sku, qty in lines.items():
            if qty > outstanding.get(sku, 0):
                raise OrderError(
                    f"order {self.order_id!r} has {outstanding.get(sku, 0)} x {sku} left to ship, not {qty}")
        for sku, qty in lines.items():
            self.shipped[sku] = self.shipped.get(sku, 0) + qty
        self.status = OrderStatus.SHIPPED if not self.outstanding() else OrderStatus.PARTIALLY_SHIPPED
