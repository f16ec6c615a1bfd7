"""ISO 4217 currencies known to the library: code, minor-unit exponent and display symbol."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal


@dataclass(frozen=True)
class Currency:
    code: str
    exponent: int  # digits after the decimal point: 2 for USD, 0 for JPY, 3 for KWD
    symbol: str

    @property
    def quantum(self) -> Decimal:
        """The smallest amount, as a Decimal exponent: Decimal('0.01') for USD."""
        return Decimal(1).scaleb(-self.exponent)


_CURRENCIES = {c.code: c for c in [
    Currency("USD", 2, "$"),
    Currency("EUR", 2, "€"),
    Currency("GBP", 2, "£"),
    Currency("CHF", 2, "CHF "),
    Currency("JPY", 0, "¥"),
    Currency("KWD", 3, "KD "),
]}


def get_currency(code: str | Currency) -> Currency:
    if isinstance(code, Currency):
        return code
    if not isinstance(code, str):
        raise TypeError(f"currency must be an ISO code string, got {type(code).__name__}")
    try:
        return _CURRENCIES[code.upper()]
    except KeyError:
        raise ValueError(f"unknown currency {code!r}; known: {sorted(_CURRENCIES)}") from None


def register_currency(currency: Currency) -> None:
    if currency.exponent < 0:
        raise ValueError(f"currency exponent must be >= 0, got {currency.exponent}")
    _CURRENCIES[currency.code] = currency
