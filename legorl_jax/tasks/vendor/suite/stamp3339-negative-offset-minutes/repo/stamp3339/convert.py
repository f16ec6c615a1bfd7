"""Moving instants between offsets and to and from Unix time."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from stamp3339.offsets import offset_tzinfo

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _require_aware(dt: datetime) -> None:
    if not isinstance(dt, datetime):
        raise TypeError(f"expected a datetime, got {type(dt).__name__}")
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(f"expected an aware datetime, got naive {dt!r}")


def to_utc(dt: datetime) -> datetime:
    _require_aware(dt)
    return dt.astimezone(timezone.utc)


def to_offset(dt: datetime, offset: str | int) -> datetime:
    """The same instant expressed at another fixed offset."""
    _require_aware(dt)
    return dt.astimezone(offset_tzinfo(offset))


def to_epoch(dt: datetime) -> float:
    _require_aware(dt)
    delta = dt - _EPOCH
    return delta.days * 86400 + delta.seconds + delta.microseconds / 1_000_000


def from_epoch(seconds: float, offset: str | int = 0) -> datetime:
    # Whole and fractional parts separately: float seconds lose microseconds far from 1970.
    whole = int(seconds // 1)
    micro = round((seconds - whole) * 1_000_000)
    return (_EPOCH + timedelta(seconds=whole, microseconds=micro)).astimezone(offset_tzinfo(offset))
