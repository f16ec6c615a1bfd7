"""sluggard: readable, unique URL slugs."""

from sluggard.filenames import safe_filename
from sluggard.slugify import fit_length, slugify
from sluggard.translit import transliterate
from sluggard.unique import UniqueSlugger

__all__ = ["UniqueSlugger", "fit_length", "safe_filename", "slugify", "transliterate"]
