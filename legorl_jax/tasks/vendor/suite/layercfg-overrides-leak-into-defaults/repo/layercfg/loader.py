"""Loader: runs the layers in order and returns a validated Config that remembers where values came from."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from layercfg.errors import ConfigError
from layercfg.merge import leaf_paths, merge_layers
from layercfg.paths import get_path, set_path
from layercfg.schema import check_schema, convert, type_at, validate
from layercfg.sources import env_overrides, load_file, parse_override


class Config(Mapping[str, Any]):
    def __init__(self, data: dict[str, Any], origins: dict[str, str]) -> None:
        self._data = data
        self._origins = origins

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def get_path(self, path: str, default: Any = None) -> Any:
        return get_path(self._data, path, default)

    def explain(self, path: str) -> str:
        """Which layer set this value: 'defaults', a file path, 'env:NAME' or 'override'."""
        try:
            return self._origins[path]
        except KeyError:
            raise KeyError(f"no setting {path!r}") from None

    def as_dict(self) -> dict[str, Any]:
        return self._data


class Loader:
    def __init__(self, defaults: Mapping[str, Any], schema: Mapping[str, Any], env_prefix: str = "APP") -> None:
        check_schema(schema)
        validate(defaults, schema)
        self.defaults = defaults
        self.schema = schema
        self.env_prefix = env_prefix

    def load(
        self,
        files: Iterable[str | Path] = (),
        overrides: Iterable[str] = (),
        environ: Mapping[str, str] | None = None,
    ) -> Config:
        environ = os.environ if environ is None else environ
        layers: list[tuple[str, Mapping[str, Any]]] = [("defaults", self.defaults)]
        layers += [(str(f), load_file(f)) for f in files]
        data = merge_layers(layer for _, layer in layers)
        origins: dict[str, str] = {}
        for name, layer in layers:
            origins.update({path: name for path in leaf_paths(layer)})

        changes: list[tuple[str, str, bool, str]] = []
        for path, raw in env_overrides(environ, self.env_prefix):
            env_name = f"{self.env_prefix.upper()}_{path.upper().replace('.', '__')}"
            changes.append((path, raw, False, f"env:{env_name}"))
        for text in overrides:
            path, raw, append = parse_override(text)
            changes.append((path, raw, append, "override"))
        for path, raw, append, origin in changes:
            target = type_at(self.schema, path)
            value = convert(raw, target, path)
            if append and target is not list:
                raise ConfigError(f"'+=' needs a list setting, {path!r} is {target.__name__}")
            set_path(data, path, value, append=append)
            origins[path] = origin

        validate(data, self.schema)
        return Config(data, origins)
