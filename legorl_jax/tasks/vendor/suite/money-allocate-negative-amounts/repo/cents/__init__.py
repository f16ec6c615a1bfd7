"""Exact money amounts."""

from cents.allocate import allocate, split_evenly
from cents.currency import Currency, get_currency
from cents.format import format_money, parse_money
from cents.money import CurrencyMismatch, Money

__all__ = ["Currency", "CurrencyMismatch", "Money", "allocate", "format_money", "get_currency",
           "parse_money", "split_evenly"]
__version__ = "1.4.1"
