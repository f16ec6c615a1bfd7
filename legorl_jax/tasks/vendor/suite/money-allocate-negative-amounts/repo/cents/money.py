"""Money: an exact Decimal amount in a currency, always rounded to the currency's minor unit.

Rounding is half-up (commercial rounding) everywhere: at construction, after multiplication.
Floats are rejected at construction because they cannot represent most decimal amounts; pass
strings, ints or Decimals.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from functools import total_ordering

from cents.currency import Currency, get_currency


class CurrencyMismatch(ValueError):
    pass


def to_decimal(value: object, name: str = "amount") -> Decimal:
    if isinstance(value, bool) or isinstance(value, float):
        raise TypeError(f"{name} must be a str, int or Decimal (not {type(value).__name__}): {value!r}")
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, (int, str)):
        try:
            result = Decimal(value)
        except InvalidOperation:
            raise ValueError(f"{name} is not a number: {value!r}") from None
    else:
        raise TypeError(f"{name} must be a str, int or Decimal, got {type(value).__name__}")
    if not result.is_finite():
        raise ValueError(f"{name} must be finite, got {value!r}")
    return result


@total_ordering
class Money:
    __slots__ = ("amount", "currency")

    def __init__(self, amount: object, currency: str | Currency) -> None:
        self.currency = get_currency(currency)
        self.amount = to_decimal(amount).quantize(self.currency.quantum, rounding=ROUND_HALF_UP)

    @classmethod
    def from_minor(cls, units: int, currency: str | Currency) -> Money:
        cur = get_currency(currency)
        if isinstance(units, bool) or not isinstance(units, int):
            raise TypeError(f"minor units must be an int, got {units!r}")
        return cls(Decimal(units).scaleb(-cur.exponent), cur)

    @property
    def minor(self) -> int:
        """The amount in minor units (cents): Money('12.34', 'USD').minor == 1234."""
        return int(self.amount.scaleb(self.currency.exponent))

    def _check(self, other: object) -> Money:
        if not isinstance(other, Money):
            raise TypeError(f"expected Money, got {type(other).__name__}")
        if other.currency != self.currency:
            raise CurrencyMismatch(f"cannot combine {self.currency.code} and {other.currency.code}")
        return other

    def __add__(self, other: Money) -> Money:
        return Money(self.amount + self._check(other).amount, self.currency)

    def __sub__(self, other: Money) -> Money:
        return Money(self.amount - self._check(other).amount, self.currency)

    def __neg__(self) -> Money:
        return Money(-self.amount, self.currency)

    def __abs__(self) -> Money:
        return Money(abs(self.amount), self.currency)

    def __mul__(self, factor: object) -> Money:
        return Money(self.amount * to_decimal(factor, "factor"), self.currency)

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Money):
            return NotImplemented
        return self.currency == other.currency and self.amount == other.amount

    def __lt__(self, other: Money) -> bool:
        return self.amount < self._check(other).amount

    def __hash__(self) -> int:
        return hash((self.amount, self.currency.code))

    def __bool__(self) -> bool:
        return bool(self.amount)

    def __repr__(self) -> str:
        return f"Money('{self.amount}', '{self.currency.code}')"

    def __str__(self) -> str:
        return f"{self.amount} {self.currency.code}"
