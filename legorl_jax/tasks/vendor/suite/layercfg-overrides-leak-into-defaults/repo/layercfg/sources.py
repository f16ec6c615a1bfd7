"""The layers' raw inputs: config files and environment variables."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from layercfg.errors import ConfigError


def load_file(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(p)!r}: {exc.strerror}") from None
    try:
        if p.suffix == ".toml":
            data = tomllib.loads(raw.decode("utf-8"))
        elif p.suffix == ".json":
            data = json.loads(raw)
        else:
            raise ConfigError(f"config file {str(p)!r} must end in .toml or .json")
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{str(p)!r} is not valid {p.suffix[1:].upper()}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{str(p)!r} must contain a table at the top level")
    return data


def env_overrides(environ: Mapping[str, str], prefix: str) -> list[tuple[str, str]]:
    """PREFIX_SERVER__PORT=9000 -> ('server.port', '9000'); sorted, so the result is deterministic."""
    if not prefix or not prefix.isidentifier():
        raise ValueError(f"env prefix must be an identifier, got {prefix!r}")
    marker = prefix.upper() + "_"
    out = []
    for name in sorted(environ):
        if name.startswith(marker) and len(name) > len(marker):
            path = ".".join(part.lower() for part in name[len(marker) :].split("__"))
            out.append((path, environ[name]))
    return out


def parse_override(text: str) -> tuple[str, str, bool]:
    """'a.b=1' -> ('a.b', '1', False); 'a.list+=x' -> ('a.list', 'x', True)."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ConfigError(f"override must look like key=value or key+=value, got {text!r}")
    append = key.endswith("+")
    key = key[:-1] if append else key
    return key.strip(), value, append
