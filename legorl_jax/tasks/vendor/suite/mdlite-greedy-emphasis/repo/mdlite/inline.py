"""Inline markup inside a block: code spans, images, links, strong and emphasis.

Code spans are cut out first and replaced by placeholders so nothing inside them is formatted;
the remaining text is HTML-escaped before the other patterns run, so patterns see escaped text.
"""

from __future__ import annotations

import re

from mdlite.escape import escape_attr_quotes, escape_text

_CODE = re.compile(r"(`+)(.+?)\1")
_IMAGE = re.compile(r'!\[([^\]]*)\]\(([^)\s]+)(?:\s+"([^"]*)")?\)')
_LINK = re.compile(r'\[([^\]]+)\]\(([^)\s]+)(?:\s+"([^"]*)")?\)')
_STRONG = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_EMPHASIS = re.compile(r"(?<![\w*])(\*|_)(?=[^\s*])(.+)(?<=[^\s*])\1(?![\w*])")
_PLACEHOLDER = "\x00{}\x00"
_SAFE_SCHEMES = ("http:", "https:", "mailto:", "/", "#", "./", "../")


def _safe_url(url: str) -> str:
    """Relative URLs and a few schemes pass; anything else (javascript:, data:) becomes '#'."""
    if ":" not in url.split("/")[0] or url.lower().startswith(_SAFE_SCHEMES):
        return url
    return "#"


def _title_attr(title: str | None) -> str:
    return f' title="{escape_attr_quotes(title)}"' if title else ""


def render_inline(text: str) -> str:
    codes: list[str] = []

    def stash_code(m: re.Match[str]) -> str:
        codes.append(f"<code>{escape_text(m.group(2).strip())}</code>")
        return _PLACEHOLDER.format(len(codes) - 1)

    text = _CODE.sub(stash_code, text)
    text = escape_text(text)
    text = _IMAGE.sub(
        lambda m: f'<img src="{escape_attr_quotes(_safe_url(m.group(2)))}" alt="{escape_attr_quotes(m.group(1))}"'
        f"{_title_attr(m.group(3))} />",
        text,
    )
    text = _LINK.sub(
        lambda m: f'<a href="{escape_attr_quotes(_safe_url(m.group(2)))}"{_title_attr(m.group(3))}>{m.group(1)}</a>',
        text,
    )
    text = _STRONG.sub(lambda m: f"<strong>{m.group(2)}</strong>", text)
    text = _EMPHASIS.sub(lambda m: f"<em>{m.group(2)}</em>", text)
    return re.sub("\x00(\\d+)\x00", lambda m: codes[int(m.group(1))], text)
