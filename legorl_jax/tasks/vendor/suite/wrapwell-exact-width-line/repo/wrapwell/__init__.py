"""wrapwell: wrap, fill, justify and indent text by display width."""

from wrapwell.indent import dedent, indent
from wrapwell.justify import center, justify
from wrapwell.width import display_width
from wrapwell.wrap import fill, wrap

__all__ = ["center", "dedent", "display_width", "fill", "indent", "justify", "wrap"]
