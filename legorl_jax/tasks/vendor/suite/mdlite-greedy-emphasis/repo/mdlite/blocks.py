"""Block structure: splitting source lines into headings, paragraphs, lists, quotes and code."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_RULE = re.compile(r"^\s*([-*_])(\s*\1){2,}\s*$")
_BULLET = re.compile(r"^\s*[-*+]\s+(.*)$")
_ORDERED = re.compile(r"^\s*(\d{1,9})[.)]\s+(.*)$")
_FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)\s*$")


@dataclass
class Block:
    kind: str  # heading, paragraph, bullet_list, ordered_list, quote, code, rule
    text: str = ""
    level: int = 0
    items: list[str] = field(default_factory=list)
    language: str = ""
    start: int = 1


def parse_blocks(source: str) -> list[Block]:
    lines = source.replace("\r\n", "\n").replace("\t", "    ").split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence:
            marker, language = fence.group(1), fence.group(2)
            body: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(marker):
                body.append(lines[i])
                i += 1
            i += 1  # the closing fence (or the end of the input)
            blocks.append(Block("code", "\n".join(body), language=language))
            continue
        heading = _HEADING.match(line)
        if heading:
            blocks.append(Block("heading", heading.group(2), level=len(heading.group(1))))
            i += 1
            continue
        if _RULE.match(line):
            blocks.append(Block("rule"))
            i += 1
            continue
        if line.lstrip().startswith(">"):
            quoted: list[str] = []
            while i < len(lines) and lines[i].lstrip().startswith(">"):
                quoted.append(re.sub(r"^\s*>\s?", "", lines[i]))
                i += 1
            blocks.append(Block("quote", "\n".join(quoted)))
            continue
        for kind, pattern in (("bullet_list", _BULLET), ("ordered_list", _ORDERED)):
            if pattern.match(line):
                items: list[str] = []
                start = int(_ORDERED.match(line).group(1)) if kind == "ordered_list" else 1
                while i < len(lines) and lines[i].strip():
                    m = pattern.match(lines[i])
                    if m:
                        items.append(m.group(m.lastindex))
                    elif items:
                        items[-1] += " " + lines[i].strip()  # a lazy continuation line
                    i += 1
                blocks.append(Block(kind, items=items, start=start))
                break
        else:
            para: list[str] = []
            while i < len(lines) and lines[i].strip() and not _starts_block(lines[i]):
                para.append(lines[i].strip())
                i += 1
            blocks.append(Block("paragraph", "\n".join(para)))
    return blocks


def _starts_block(line: str) -> bool:
    return bool(_HEADING.match(line) or _FENCE.match(line) or _RULE.match(line) or line.lstrip().startswith(">"))
