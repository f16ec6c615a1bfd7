"""Rendering blocks to HTML; block quotes are rendered recursively."""

from __future__ import annotations

from mdlite.blocks import Block, parse_blocks
from mdlite.escape import escape_attr, escape_text
from mdlite.inline import render_inline


def render_block(block: Block) -> str:
    if block.kind == "heading":
        return f"<h{block.level}>{render_inline(block.text)}</h{block.level}>"
    if block.kind == "paragraph":
        return f"<p>{render_inline(block.text)}</p>"
    if block.kind == "rule":
        return "<hr />"
    if block.kind == "code":
        cls = f' class="language-{escape_attr(block.language)}"' if block.language else ""
        return f"<pre><code{cls}>{escape_text(block.text)}\n</code></pre>"
    if block.kind == "quote":
        return f"<blockquote>\n{to_html(block.text)}\n</blockquote>"
    if block.kind in ("bullet_list", "ordered_list"):
        tag = "ul" if block.kind == "bullet_list" else "ol"
        start = f' start="{block.start}"' if tag == "ol" and block.start != 1 else ""
        items = "\n".join(f"<li>{render_inline(item)}</li>" for item in block.items)
        return f"<{tag}{start}>\n{items}\n</{tag}>"
    raise ValueError(f"unknown block kind {block.kind!r}")


def to_html(source: str) -> str:
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    return "\n".join(render_block(b) for b in parse_blocks(source))
