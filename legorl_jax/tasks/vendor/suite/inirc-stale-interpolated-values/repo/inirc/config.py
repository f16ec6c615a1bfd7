"""Config: sections of raw values, typed getters and mutation, over the interpolator."""

from __future__ import annotations

from collections.abc import Iterator

from inirc.interpolation import Interpolator
from inirc.parser import DEFAULT, normalize_key, parse

_TRUE = {"1", "yes", "true", "on"}
_FALSE = {"0", "no", "false", "off"}
_MISSING = object()


class Config:
    def __init__(self) -> None:
        self._sections: dict[str, dict[str, str]] = {DEFAULT: {}}
        self._interp = Interpolator(self._raw)

    @classmethod
    def from_string(cls, text: str) -> "Config":
        cfg = cls()
        cfg.read_string(text)
        return cfg

    def read_string(self, text: str) -> None:
        """Merges more INI text in; later values replace earlier ones."""
        for name, options in parse(text).items():
            self._sections.setdefault(name, {}).update(options)
        self._interp.clear()

    # Raw access ----------------------------------------------------------------------------------

    def _raw(self, section: str, key: str) -> str | None:
        if section not in self._sections:
            return None
        options = self._sections[section]
        if key in options:
            return options[key]
        return self._sections[DEFAULT].get(key)

    def sections(self) -> list[str]:
        return [name for name in self._sections if name != DEFAULT]

    def has_option(self, section: str, key: str) -> bool:
        return self._raw(section, normalize_key(key)) is not None

    def options(self, section: str) -> list[str]:
        self._require(section)
        return list(dict.fromkeys([*self._sections[section], *self._sections[DEFAULT]]))

    def _require(self, section: str) -> None:
        if section not in self._sections:
            raise KeyError(f"no section [{section}]")

    # Getters -------------------------------------------------------------------------------------

    def get(self, section: str, key: str, fallback: object = _MISSING) -> str:
        if not self.has_option(section, key):
            if fallback is _MISSING:
                self._require(section)
                raise KeyError(f"no option {normalize_key(key)!r} in section [{section}]")
            return fallback  # type: ignore[return-value]
        return self._interp.resolve(section, key)

    def getint(self, section: str, key: str, fallback: object = _MISSING) -> int:
        value = self.get(section, key, fallback)
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ValueError(f"[{section}] {key} = {value!r} is not an integer") from None

    def getboolean(self, section: str, key: str, fallback: object = _MISSING) -> bool:
        value = self.get(section, key, fallback)
        if isinstance(value, bool):
            return value
        lowered = str(value).strip().lower()
        if lowered not in _TRUE | _FALSE:
            raise ValueError(f"[{section}] {key} = {value!r} is not a boolean")
        return lowered in _TRUE

    def getlist(self, section: str, key: str, separator: str = ",") -> list[str]:
        """Items split on the separator and on newlines (continuation lines), blanks dropped."""
        value = self.get(section, key)
        items = [part for line in value.splitlines() for part in line.split(separator)]
        return [item.strip() for item in items if item.strip()]

    def items(self, section: str) -> Iterator[tuple[str, str]]:
        for key in self.options(section):
            yield key, self.get(section, key)

    # Mutation ------------------------------------------------------------------------------------

    def add_section(self, section: str) -> None:
        if section in self._sections:
            raise ValueError(f"section [{section}] already exists")
        if not section.strip() or "]" in section:
            raise ValueError(f"invalid section name {section!r}")
        self._sections[section] = {}

    def set(self, section: str, key: str, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"values must be str, got {type(value).__name__} for [{section}] {key}")
        self._require(section)
        self._sections[section][normalize_key(key)] = value
        self._interp.forget(section, key)

    def remove_option(self, section: str, key: str) -> bool:
        self._require(section)
        removed = self._sections[section].pop(normalize_key(key), None) is not None
        self._interp.forget(section, key)
        return removed

    # Output --------------------------------------------------------------------------------------

    def to_string(self) -> str:
        from inirc.writer import write

        return write(self._sections)
