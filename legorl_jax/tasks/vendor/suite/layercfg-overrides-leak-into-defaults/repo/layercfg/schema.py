"""Schemas: nested dicts of types. Converting override strings and validating the merged result."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layercfg.errors import ConfigError
from layercfg.paths import get_path

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
TYPES = (int, float, bool, str, list)


def check_schema(schema: Mapping[str, Any], prefix: str = "") -> None:
    for key, spec in schema.items():
        if isinstance(spec, Mapping):
            check_schema(spec, f"{prefix}{key}.")
        elif spec not in TYPES:
            raise TypeError(f"schema type for {prefix}{key!r} must be one of {TYPES} or a dict, got {spec!r}")


def type_at(schema: Mapping[str, Any], path: str) -> Any:
    spec = get_path(schema, path, None)
    if spec is None:
        raise ConfigError(f"unknown setting {path!r}")
    if isinstance(spec, Mapping):
        raise ConfigError(f"{path!r} is a table; set one of its keys instead")
    return spec


def convert(raw: str, target: Any, path: str) -> Any:
    text = raw.strip()
    try:
        if target is bool:
            lowered = text.lower()
            if lowered in _TRUE | _FALSE:
                return lowered in _TRUE
            raise ValueError(text)
        if target is list:
            return [item.strip() for item in text.split(",") if item.strip()]
        return target(text)
    except ValueError:
        raise ConfigError(f"{path}: cannot convert {raw!r} to {target.__name__}") from None


def validate(config: Mapping[str, Any], schema: Mapping[str, Any], prefix: str = "") -> None:
    """Every key must be known and of the schema's type (an int is accepted where a float is expected)."""
    for key, value in config.items():
        path = f"{prefix}{key}"
        if key not in schema:
            raise ConfigError(f"unknown setting {path!r}")
        spec = schema[key]
        if isinstance(spec, Mapping):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{path!r} must be a table, got {type(value).__name__}")
            validate(value, spec, path + ".")
            continue
        ok = isinstance(value, spec) and not (spec is int and isinstance(value, bool))
        ok = ok or (spec is float and isinstance(value, int) and not isinstance(value, bool))
        if not ok:
            raise ConfigError(f"{path!r} must be {spec.__name__}, got {value!r}")
