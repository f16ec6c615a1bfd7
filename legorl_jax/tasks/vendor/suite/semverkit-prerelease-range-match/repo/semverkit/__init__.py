"""semverkit: SemVer versions, comparison and ranges."""

from semverkit.comparator import Comparator
from semverkit.ranges import Range, max_satisfying, min_satisfying, parse_range, satisfies
from semverkit.sorting import latest, sort_versions
from semverkit.version import Version, VersionError

__all__ = [
    "Comparator",
    "Range",
    "Version",
    "VersionError",
    "latest",
    "max_satisfying",
    "min_satisfying",
    "parse_range",
    "satisfies",
    "sort_versions",
]
