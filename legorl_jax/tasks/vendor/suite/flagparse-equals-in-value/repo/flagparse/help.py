"""Usage and help text generated from the declarations."""

from __future__ import annotations

from collections.abc import Sequence

from flagparse.spec import Option, Positional


def _option_usage(opt: Option) -> str:
    text = opt.names[0] + (f" {opt.metavar}" if opt.takes_value else "")
    return text if opt.required else f"[{text}]"


def format_usage(program: str, options: Sequence[Option], positionals: Sequence[Positional]) -> str:
    parts = [program] + [_option_usage(o) for o in options]
    parts += [f"[{p.dest}]" if p.optional else p.dest for p in positionals]
    return "usage: " + " ".join(parts)


def format_help(program: str, description: str, options: Sequence[Option],
                positionals: Sequence[Positional]) -> str:
    lines = [format_usage(program, options, positionals)]
    if description:
        lines += ["", description]
    if positionals:
        lines += ["", "positional arguments:"]
        lines += [f"  {p.dest:<22}{p.help}".rstrip() for p in positionals]
    if options:
        lines += ["", "options:"]
        for opt in options:
            label = ", ".join(opt.names) + (f" {opt.metavar}" if opt.takes_value else "")
            extra = f" (default: {opt.default!r})" if opt.default not in (None, False, 0, []) else ""
            lines.append(f"  {label:<22}{opt.help}{extra}".rstrip())
    return "\n".join(lines) + "\n"
