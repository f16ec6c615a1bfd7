"""Version: parsing, precedence (SemVer 2.0.0 section 11) and bumping."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

_VERSION = re.compile(
    r"^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


class VersionError(ValueError):
    pass


def _identifier_key(ident: str) -> tuple[int, int, str]:
    # Numeric identifiers sort numerically and before alphanumeric ones (rule 11.4.3).
    return (0, int(ident), "") if ident.isdigit() else (1, 0, ident)


@functools.total_ordering
@dataclass(frozen=True)
class Version:
    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: "str | Version") -> "Version":
        if isinstance(text, Version):
            return text
        if not isinstance(text, str):
            raise TypeError(f"version must be a str, got {type(text).__name__}")
        m = _VERSION.match(text.strip())
        if not m:
            raise VersionError(f"invalid semantic version {text!r}")
        pre = tuple(m.group(4).split(".")) if m.group(4) else ()
        build = tuple(m.group(5).split(".")) if m.group(5) else ()
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3)), pre, build)

    def _key(self) -> tuple:
        # A release sorts after all of its prereleases (rule 11.3); build metadata is ignored (rule 10).
        pre = (1,) if not self.prerelease else (0, tuple(_identifier_key(p) for p in self.prerelease))
        return (self.major, self.minor, self.patch, pre)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def bump_major(self) -> "Version":
        return Version(self.major + 1, 0, 0)

    def bump_minor(self) -> "Version":
        return Version(self.major, self.minor + 1, 0)

    def bump_patch(self) -> "Version":
        # 1.2.3-rc.1 -> 1.2.3: finishing a prerelease does not skip a patch number.
        return Version(self.major, self.minor, self.patch if self.prerelease else self.patch + 1)
