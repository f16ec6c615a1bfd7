"""Building query strings from mappings or pairs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from qsparse.percent import percent_encode


def _flatten(data: Mapping[str, object] | Iterable[tuple[str, object]]) -> list[tuple[str, object]]:
    items = data.items() if isinstance(data, Mapping) else data
    out: list[tuple[str, object]] = []
    for key, value in items:
        if isinstance(value, (list, tuple)):
            out.extend((key, v) for v in value)
        else:
            out.append((key, value))
    return out


def _text(key: str, value: object) -> str:
    if value is None:
        raise ValueError(f"value for {key!r} is None; omit the key or pass ''")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise TypeError(f"value for {key!r} must be str, int, float or bool, got {type(value).__name__}")


def build_query(data: Mapping[str, object] | Iterable[tuple[str, object]], sort: bool = False,
                safe: str = "") -> str:
    """Encodes pairs (list values expand to repeated keys). sort=True orders by key, stably."""
    pairs = [(k, _text(k, v)) for k, v in _flatten(data)]
    if sort:
        pairs.sort(key=lambda kv: kv[0])
    return "&".join(f"{percent_encode(k, safe)}={percent_encode(v, safe)}" for k, v in pairs)
