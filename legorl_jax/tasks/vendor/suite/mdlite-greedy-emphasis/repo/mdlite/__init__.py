"""mdlite: convert a practical subset of Markdown to HTML."""

from mdlite.blocks import Block, parse_blocks
from mdlite.inline import render_inline
from mdlite.render import to_html

__all__ = ["Block", "parse_blocks", "render_inline", "to_html"]
