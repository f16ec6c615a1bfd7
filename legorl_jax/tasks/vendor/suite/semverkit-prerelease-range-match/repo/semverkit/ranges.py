"""npm-style ranges: parsing, desugaring to comparator sets, and matching.

A Range is a tuple of alternatives ('||'); each alternative is a tuple of comparators that must all
match. Partial versions and operators are desugared as node-semver does, with plain upper bounds
('^1.2.3' is '>=1.2.3 <2.0.0').
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from semverkit.comparator import Comparator
from semverkit.version import Version, VersionError

_PARTIAL = re.compile(
    r"^v?(?P<major>0|[1-9]\d*|[xX*])(?:\.(?P<minor>0|[1-9]\d*|[xX*])(?:\.(?P<patch>0|[1-9]\d*|[xX*])"
    r"(?:-(?P<pre>[0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?)?)?$"
)
_SIMPLE = re.compile(r"^(?P<op>\^|~>?|>=|<=|>|<|=)?\s*(?P<partial>\S+)$")


def _wild(part: str | None) -> bool:
    return part is None or part in ("x", "X", "*")


@dataclass(frozen=True)
class _Partial:
    major: int | None
    minor: int | None
    patch: int | None
    pre: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> "_Partial":
        m = _PARTIAL.match(text)
        if not m:
            raise VersionError(f"invalid version in range: {text!r}")
        major, minor, patch = (None if _wild(m[g]) else int(m[g]) for g in ("major", "minor", "patch"))
        if major is None:
            minor = patch = None
        elif minor is None:
            patch = None
        return cls(major, minor, patch, tuple(m["pre"].split(".")) if m["pre"] and patch is not None else ())

    def floor(self) -> Version:
        return Version(self.major or 0, self.minor or 0, self.patch or 0, self.pre)

    def next_up(self) -> Version:
        """The first version above everything the partial covers (1.2 -> 1.3.0, 1 -> 2.0.0)."""
        if self.minor is None:
            return Version((self.major or 0) + 1, 0, 0)
        return Version(self.major or 0, self.minor + 1, 0)


def _desugar(op: str, p: _Partial) -> list[Comparator]:
    full = p.patch is not None
    if p.major is None:
        return [] if op in ("", "=", ">=", "<=", "^", "~", "~>") else [Comparator("<", Version(0, 0, 0))]
    if op == "^":
        lo = p.floor()
        if p.major > 0 or p.minor is None:
            hi = Version(p.major + 1, 0, 0)
        elif p.minor > 0 or p.patch is None:
            hi = Version(0, p.minor + 1, 0)
        else:
            hi = Version(0, 0, p.patch + 1)
        return [Comparator(">=", lo), Comparator("<", hi)]
    if op in ("~", "~>"):
        hi = Version(p.major + 1, 0, 0) if p.minor is None else Version(p.major, p.minor + 1, 0)
        return [Comparator(">=", p.floor()), Comparator("<", hi)]
    if full:
        return [Comparator(op or "=", p.floor())]
    # Partial versions with an operator cover the whole partial range.
    if op in ("", "="):
        return [Comparator(">=", p.floor()), Comparator("<", p.next_up())]
    if op == ">":
        return [Comparator(">=", p.next_up())]
    if op == "<=":
        return [Comparator("<", p.next_up())]
    return [Comparator(op, p.floor())]  # >= and < on the floor


def _parse_alternative(text: str) -> tuple[Comparator, ...]:
    text = text.strip()
    hyphen = re.fullmatch(r"(\S+)\s+-\s+(\S+)", text)
    if hyphen:
        lo, hi = _Partial.parse(hyphen[1]), _Partial.parse(hyphen[2])
        upper = [Comparator("<=", hi.floor())] if hi.patch is not None else _desugar("<=", hi)
        return tuple([Comparator(">=", lo.floor())] + upper)
    # Allow a space between an operator and its version: '>= 1.2.3'.
    text = re.sub(r"(\^|~>?|>=|<=|>|<|=)\s+", r"\1", text)
    comparators: list[Comparator] = []
    for token in text.split():
        m = _SIMPLE.match(token)
        if not m:
            raise VersionError(f"invalid range element {token!r}")
        comparators += _desugar(m["op"] or "", _Partial.parse(m["partial"]))
    return tuple(comparators)


@dataclass(frozen=True)
class Range:
    alternatives: tuple[tuple[Comparator, ...], ...]

    @classmethod
    def parse(cls, text: "str | Range") -> "Range":
        if isinstance(text, Range):
            return text
        if not isinstance(text, str):
            raise TypeError(f"range must be a str, got {type(text).__name__}")
        parts = text.split("||")
        if any(not p.strip() for p in parts) and len(parts) > 1:
            raise VersionError(f"empty alternative in range {text!r}")
        return cls(tuple(_parse_alternative(p) for p in parts))

    def test(self, version: "Version | str") -> bool:
        v = Version.parse(version)
        return any(all(c.matches(v) for c in alternative) for alternative in self.alternatives)

    def __str__(self) -> str:
        return " || ".join(" ".join(str(c) for c in alt) or "*" for alt in self.alternatives)


def parse_range(text: str) -> Range:
    return Range.parse(text)


def satisfies(version: "Version | str", range_: "Range | str") -> bool:
    return Range.parse(range_).test(version)


def _candidates(versions: Iterable["Version | str"], range_: "Range | str") -> list[tuple[Version, object]]:
    rng = Range.parse(range_)
    out = []
    for original in versions:
        v = Version.parse(original)
        if rng.test(v):
            out.append((v, original))
    return out


def max_satisfying(versions: Iterable["Version | str"], range_: "Range | str") -> object | None:
    """The highest matching version, returned as it was given (str stays str); None if none match."""
    found = _candidates(versions, range_)
    return max(found, key=lambda pair: pair[0])[1] if found else None


def min_satisfying(versions: Iterable["Version | str"], range_: "Range | str") -> object | None:
    found = _candidates(versions, range_)
    return min(found, key=lambda pair: pair[0])[1] if found else None
