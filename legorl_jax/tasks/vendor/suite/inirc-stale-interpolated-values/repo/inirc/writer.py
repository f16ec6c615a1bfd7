"""Writing sections back to INI text with raw (uninterpolated) values."""

from __future__ import annotations

from inirc.parser import DEFAULT


def _format_value(value: str) -> str:
    lines = value.split("\n")
    return "\n".join([lines[0]] + [f"    {line}" for line in lines[1:]])


def write(sections: dict[str, dict[str, str]]) -> str:
    """DEFAULT first (when not empty), then the other sections in insertion order."""
    order = ([DEFAULT] if sections.get(DEFAULT) else []) + [s for s in sections if s != DEFAULT]
    blocks = []
    for name in order:
        lines = [f"[{name}]"] + [f"{k} = {_format_value(v)}" for k, v in sections[name].items()]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"
