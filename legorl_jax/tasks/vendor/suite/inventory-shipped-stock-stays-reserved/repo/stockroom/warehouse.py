"""Warehouse: the facade tying the ledger, the reservation book and the orders together."""

from __future__ import annotations

from stockroom.errors import InsufficientStock, OrderError, check_quantity, check_sku
from stockroom.ledger import StockLedger
from stockroom.orders import Order, OrderStatus
from stockroom.reservations import ReservationBook


class Warehouse:
    def __init__(self) -> None:
        self.ledger = StockLedger()
        self.reservations = ReservationBook()
        self.orders: dict[str, Order] = {}

    def receive(self, sku: str, qty: int, reference: str = "") -> None:
        self.ledger.record(sku, check_quantity(qty), "receipt", reference)

    def adjust(self, sku: str, qty: int, reason: str) -> None:
        """Stock-take corrections (breakage, miscounts); may not push available below zero."""
        if qty < 0 and -qty > self.available(sku):
            raise InsufficientStock(sku, -qty, self.available(sku))
        self.ledger.record(sku, qty, "adjustment", reason)

    def on_hand(self, sku: str) -> int:
        return self.ledger.on_hand(check_sku(sku))

    def reserved(self, sku: str) -> int:
        return self.reservations.reserved(check_sku(sku))

    def available(self, sku: str) -> int:
        return self.on_hand(sku) - self.reserved(sku)

    def place_order(self, order_id: str, lines: dict[str, int]) -> Order:
        if not isinstance(order_id, str) or not order_id:
            raise ValueError(f"order id must be a non-empty string, got {order_id!r}")
        if order_id in self.orders:
            raise OrderError(f"order {order_id!r} already exists")
        if not lines:
            raise ValueError(f"order {order_id!r} has no lines")
        for sku, qty in lines.items():
            check_sku(sku)
            check_quantity(qty)
            if qty > self.available(sku):
                raise InsufficientStock(sku, qty, self.available(sku))
        for sku, qty in lines.items():
            self.reservations.reserve(order_id, sku, qty)
        order = Order(order_id, dict(lines))
        self.orders[order_id] = order
        return order

    def _order(self, order_id: str) -> Order:
        try:
            return self.orders[order_id]
        except KeyError:
            raise OrderError(f"unknown order {order_id!r}") from None

    def ship_order(self, order_id: str, lines: dict[str, int] | None = None) -> dict[str, int]:
        """Ships the given lines (default: everything outstanding); returns what was shipped."""
        order = self._order(order_id)
        order.check_open("ship")
        shipment = order.outstanding() if lines is None else dict(lines)
        for qty in shipment.values():
            check_quantity(qty)
        order.record_shipment(shipment)
        for sku, qty in shipment.items():
            self.ledger.record(sku, -qty, "shipment", order_id)
        return shipment

    def cancel_order(self, order_id: str) -> dict[str, int]:
        """Cancels what has not shipped yet; returns the released quantities."""
        order = self._order(order_id)
        order.check_open("cancel")
        order.status = OrderStatus.CANCELLED
        return self.reservations.release(order_id)
