"""Syntax-based normalization (RFC 3986 6.2.2) plus default-port removal (6.2.3)."""

from __future__ import annotations

import re

from urlkit.compose import compose
from urlkit.dots import remove_dot_segments
from urlkit.parse import URL, parse_url

DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443", "ftp": "21"}
_UNRESERVED = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


def _normalize_escapes(text: str | None) -> str | None:
    """Uppercases escapes and decodes those that stand for unreserved characters."""
    if text is None:
        return None

    def fix(m: re.Match[str]) -> str:
        ch = chr(int(m.group(1), 16))
        return ch if ch in _UNRESERVED else "%" + m.group(1).upper()

    return _ESCAPE.sub(fix, text)


def _normalize_authority(scheme: str | None, authority: str | None) -> str | None:
    if authority is None:
        return None
    userinfo, at, hostport = authority.rpartition("@")
    host, colon, port = hostport.rpartition(":") if not hostport.endswith("]") else (hostport, "", "")
    if not colon:
        host, port = hostport, ""
    if port and DEFAULT_PORTS.get(scheme or "") == port:
        colon, port = "", ""
    if port == "":
        colon = ""
    return f"{userinfo}{at}{_normalize_escapes(host.lower())}{colon}{port}"


def normalize_url(url: URL) -> URL:
    scheme = url.scheme.lower() if url.scheme is not None else None
    authority = _normalize_authority(scheme, url.authority)
    path = remove_dot_segments(_normalize_escapes(url.path) or "")
    if authority is not None and path == "":
        path = "/"
    return URL(scheme, authority, path, _normalize_escapes(url.query), _normalize_escapes(url.fragment))


def normalize(text: str) -> str:
    return compose(normalize_url(parse_url(text)))
