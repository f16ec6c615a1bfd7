"""Sorting and picking versions."""

from __future__ import annotations

from collections.abc import Iterable

from semverkit.version import Version


def sort_versions(versions: Iterable["Version | str"], reverse: bool = False) -> list:
    """Sorted by precedence; versions equal in precedence keep their input order (stable)."""
    items = list(versions)
    return sorted(items, key=Version.parse, reverse=reverse)


def latest(versions: Iterable["Version | str"], include_prerelease: bool = False) -> object | None:
    """The highest version; prereleases only count when asked for (or when nothing else exists)."""
    items = list(versions)
    releases = [v for v in items if not Version.parse(v).prerelease]
    pool = items if include_prerelease or not releases else releases
    return max(pool, key=Version.parse) if pool else None
