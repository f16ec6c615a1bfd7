"""Display and parsing of amounts: "-$1,234.50" <-> Money('-1234.50', 'USD').

The sign goes before the symbol, thousands are grouped with "," and the minor unit is always shown
with the currency's number of digits.
"""

from __future__ import annotations

import re

from cents.currency import Currency, _CURRENCIES, get_currency
from cents.money import Money


def format_money(money: Money, symbol: bool = True) -> str:
    cur = money.currency
    sign = "-" if money.amount < 0 else ""
    digits = f"{abs(money.amount):,.{cur.exponent}f}"
    if symbol:
        return f"{sign}{cur.symbol}{digits}"
    return f"{sign}{digits} {cur.code}"


def _by_symbol(text: str) -> tuple[Currency, str]:
    # Longest symbols first so "CHF " is not mistaken for another currency's prefix.
    for cur in sorted(_CURRENCIES.values(), key=lambda c: -len(c.symbol)):
        if text.startswith(cur.symbol):
            return cur, text[len(cur.symbol):]
    raise ValueError(f"no known currency symbol at the start of {text!r}")


_NUMBER = re.compile(r"^\d{1,3}(,\d{3})*(\.\d+)?$|^\d+(\.\d+)?$")


def parse_money(text: str, currency: str | None = None) -> Money:
    if not isinstance(text, str):
        raise TypeError(f"parse_money expects str, got {type(text).__name__}")
    body = text.strip()
    negative = body.startswith("-")
    if negative:
        body = body[1:]
    if currency is None:
        cur, body = _by_symbol(body)
    else:
        cur = get_currency(currency)
    body = body.strip()
    if not _NUMBER.match(body):
        raise ValueError(f"cannot parse amount {text!r}")
    amount = body.replace(",", "")
    return Money(("-" if negative else "") + amount, cur)
