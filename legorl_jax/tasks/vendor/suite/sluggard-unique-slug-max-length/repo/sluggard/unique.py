"""UniqueSlugger: slugs that do not collide with ones already handed out."""

from __future__ import annotations

from collections.abc import Iterable

from sluggard.slugify import fit_length, slugify


class UniqueSlugger:
    """Appends -2, -3, ... until the slug is free. Thread-unsafe; one instance per namespace."""

    def __init__(
        self,
        existing: Iterable[str] = (),
        separator: str = "-",
        max_length: int | None = None,
        stopwords: str | Iterable[str] | None = None,
    ) -> None:
        if max_length is not None and max_length < 4:
            raise ValueError(f"max_length must leave room for a suffix (>= 4), got {max_length}")
        self.separator = separator
        self.max_length = max_length
        self.stopwords = stopwords
        self._taken: set[str] = set(existing)

    def __contains__(self, slug: str) -> bool:
        return slug in self._taken

    def make(self, text: str) -> str:
        base = slugify(text, self.separator, self.max_length, stopwords=self.stopwords) or "item"
        candidate = base
        n = 1
        while candidate in self._taken:
            n += 1
            candidate = f"{base}{self.separator}{n}"
        candidate = fit_length(candidate, self.max_length, self.separator)
        self._taken.add(candidate)
        return candidate

    def reserve(self, slug: str) -> None:
        if slug in self._taken:
            raise ValueError(f"slug {slug!r} is already taken")
        self._taken.add(slug)

    def release(self, slug: str) -> None:
        """Frees a slug (e.g. when its page is deleted) so make() may hand it out again."""
        try:
            self._taken.remove(slug)
        except KeyError:
            raise ValueError(f"slug {slug!r} was never taken") from None
