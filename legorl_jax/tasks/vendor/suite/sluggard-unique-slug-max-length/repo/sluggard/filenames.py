"""safe_filename(): a title or upload name made safe for every common filesystem, keeping the extension."""

from __future__ import annotations

from sluggard.slugify import slugify

# Device names Windows refuses as a file's stem, whatever the extension.
_RESERVED = frozenset(
    ["con", "prn", "aux", "nul"] + [f"com{i}" for i in range(1, 10)] + [f"lpt{i}" for i in range(1, 10)]
)
_MAX_EXTENSION = 10


def split_extension(name: str) -> tuple[str, str]:
    """'archive.tar.gz' -> ('archive.tar', '.gz'); dotfiles and trailing dots have no extension."""
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem.strip(".") or not ext or len(ext) > _MAX_EXTENSION or not ext.isalnum():
        return name, ""
    return stem, "." + ext.lower()


def safe_filename(name: str, max_length: int = 100, fallback: str = "file") -> str:
    """Slugified stem (separator '-') plus the lowercased original extension, at most max_length chars."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    stem, ext = split_extension(name.strip())
    if max_length < len(ext) + 1:
        raise ValueError(f"max_length {max_length} leaves no room for a name before {ext!r}")
    slug = slugify(stem, max_length=max_length - len(ext)) or fallback
    if slug in _RESERVED:
        slug = f"{slug}-{fallback}"
    return slug + ext
