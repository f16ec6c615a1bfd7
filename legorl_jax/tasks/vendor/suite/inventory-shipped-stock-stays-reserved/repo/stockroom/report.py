"""Stock reports: one row per SKU, and the SKUs that need reordering."""

from __future__ import annotations

from dataclasses import dataclass

from stockroom.warehouse import Warehouse


@dataclass(frozen=True)
class StockRow:
    sku: str
    on_hand: int
    reserved: int
    available: int


def stock_report(warehouse: Warehouse) -> list[StockRow]:
    skus = sorted(set(warehouse.ledger.skus()) | {s for o in warehouse.reservations.orders()
                                                   for s in warehouse.reservations.lines(o)})
    return [StockRow(s, warehouse.on_hand(s), warehouse.reserved(s), warehouse.available(s)) for s in skus]


def low_stock(warehouse: Warehouse, reorder_points: dict[str, int]) -> list[str]:
    """SKUs whose available quantity is at or below their reorder point."""
    return sorted(sku for sku, point in reorder_points.items() if warehouse.available(sku) <= point)
