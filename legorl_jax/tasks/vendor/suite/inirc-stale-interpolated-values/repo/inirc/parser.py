"""Parsing INI text into {section: {key: raw value}}; DEFAULT is an ordinary section here."""

from __future__ import annotations

import re

from inirc.errors import DuplicateError, ParseError

DEFAULT = "DEFAULT"
_SECTION = re.compile(r"^\[(?P<name>[^\]]+)\]\s*$")
_OPTION = re.compile(r"^(?P<key>[^=:\s][^=:]*?)\s*[=:]\s*(?P<value>.*)$")


def normalize_key(key: str) -> str:
    return key.strip().lower()


def parse(text: str) -> dict[str, dict[str, str]]:
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    last_key: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if line[0] in " \t" and last_key is not None and current is not None:
            # A continuation line: appended to the previous value with a newline.
            current[last_key] = f"{current[last_key]}\n{stripped}" if current[last_key] else stripped
            continue
        m = _SECTION.match(stripped)
        if m:
            name = m["name"].strip()
            if name in sections:
                raise DuplicateError(f"section [{name}] appears twice", number)
            current = sections[name] = {}
            last_key = None
            continue
        m = _OPTION.match(stripped)
        if not m:
            raise ParseError(f"expected 'key = value', got {stripped!r}", number)
        if current is None:
            raise ParseError("option before any [section]", number)
        key = normalize_key(m["key"])
        if key in current:
            raise DuplicateError(f"key {key!r} appears twice in the same section", number)
        current[key] = m["value"].strip()
        last_key = key
    return sections
