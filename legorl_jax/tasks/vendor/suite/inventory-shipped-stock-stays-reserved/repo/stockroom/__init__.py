"""Inventory bookkeeping: ledger, reservations, orders, reports."""

from stockroom.errors import InsufficientStock, OrderError
from stockroom.ledger import Movement, StockLedger
from stockroom.orders import Order, OrderStatus
from stockroom.report import StockRow, low_stock, stock_report
from stockroom.reservations import ReservationBook
from stockroom.warehouse import Warehouse

__all__ = ["InsufficientStock", "Movement", "Order", "OrderError", "OrderStatus", "ReservationBook",
           "StockLedger", "StockRow", "Warehouse", "low_stock", "stock_report"]
__version__ = "1.2.0"
