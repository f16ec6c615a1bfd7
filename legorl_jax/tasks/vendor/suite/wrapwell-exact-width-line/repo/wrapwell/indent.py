"""Adding and removing common indentation of multi-line text."""

from __future__ import annotations

from collections.abc import Callable


def indent(text: str, prefix: str, predicate: Callable[[str], bool] | None = None) -> str:
    """Prefixes each line for which predicate holds (by default: lines that are not blank)."""
    keep = predicate or (lambda line: bool(line.strip()))
    return "".join(prefix + line if keep(line) else line for line in text.splitlines(keepends=True))


def _leading(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def dedent(text: str) -> str:
    """Removes the longest whitespace prefix shared by all non-blank lines; blank lines become empty."""
    lines = text.split("\n")
    prefixes = [_leading(line) for line in lines if line.strip()]
    if not prefixes:
        return "\n".join("" for _ in lines)
    common = prefixes[0]
    for p in prefixes[1:]:
        while not p.startswith(common):
            common = common[:-1]
    return "\n".join(line[len(common) :] if line.strip() else "" for line in lines)
