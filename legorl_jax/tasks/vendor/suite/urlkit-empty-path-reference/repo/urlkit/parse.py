"""Splitting a URI reference into its five components (RFC 3986 appendix B) and the authority parts."""

from __future__ import annotations

import re
from dataclasses import dataclass

_REFERENCE = re.compile(r"^(?:([^:/?#]+):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#(.*))?$", re.S)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*$")
_AUTHORITY = re.compile(r"^(?:(?P<userinfo>[^@]*)@)?(?P<host>\[[^\]]*\]|[^:]*)(?::(?P<port>\d*))?$")


class URLError(ValueError):
    pass


@dataclass(frozen=True)
class URL:
    scheme: str | None
    authority: str | None
    path: str
    query: str | None
    fragment: str | None

    @property
    def _authority_match(self) -> re.Match[str] | None:
        return _AUTHORITY.match(self.authority) if self.authority is not None else None

    @property
    def userinfo(self) -> str | None:
        m = self._authority_match
        return m["userinfo"] if m else None

    @property
    def host(self) -> str | None:
        m = self._authority_match
        return m["host"] if m else None

    @property
    def port(self) -> int | None:
        m = self._authority_match
        if not m or not m["port"]:
            return None
        return int(m["port"])

    def with_(self, **changes: str | None) -> "URL":
        fields = {k: getattr(self, k) for k in ("scheme", "authority", "path", "query", "fragment")}
        unknown = sorted(set(changes) - set(fields))
        if unknown:
            raise TypeError(f"unknown URL fields {unknown}")
        fields.update(changes)
        return URL(**fields)


def parse_url(text: str) -> URL:
    if not isinstance(text, str):
        raise TypeError(f"URL must be a str, got {type(text).__name__}")
    if any(ch in text for ch in " \t\r\n"):
        raise URLError(f"whitespace is not allowed in a URL: {text!r}")
    m = _REFERENCE.match(text)
    assert m is not None  # the appendix B pattern matches every string
    scheme, authority, path, query, fragment = m.groups()
    if scheme is not None and not _SCHEME.match(scheme):
        raise URLError(f"invalid scheme {scheme!r} in {text!r}")
    if authority is not None:
        am = _AUTHORITY.match(authority)
        if not am:
            raise URLError(f"invalid authority {authority!r} in {text!r}")
        if am["port"] and int(am["port"]) > 65535:
            raise URLError(f"port {am['port']} out of range in {text!r}")
    return URL(scheme, authority, path, query, fragment)
