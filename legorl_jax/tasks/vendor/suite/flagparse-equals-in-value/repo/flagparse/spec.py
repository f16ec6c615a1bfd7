"""Declarations: what an option or positional is, validated when declared."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

ACTIONS = ("store", "append", "store_true", "count")


@dataclass
class Option:
    names: tuple[str, ...]
    dest: str
    action: str = "store"
    type: Callable[[str], object] = str
    default: object = None
    choices: Sequence[object] | None = None
    required: bool = False
    help: str = ""
    metavar: str = ""

    def __post_init__(self) -> None:
        if not self.names:
            raise ValueError("an option needs at least one name")
        for name in self.names:
            if not (name.startswith("--") and len(name) > 2) and not (
                len(name) == 2 and name[0] == "-" and name[1] != "-"
            ):
                raise ValueError(f"option name must look like --long or -s, got {name!r}")
        if self.action not in ACTIONS:
            raise ValueError(f"action must be one of {ACTIONS}, got {self.action!r}")
        if not self.metavar:
            self.metavar = self.dest.upper()

    @property
    def takes_value(self) -> bool:
        return self.action in ("store", "append")

    @property
    def display(self) -> str:
        return "/".join(self.names)


@dataclass
class Positional:
    dest: str
    type: Callable[[str], object] = str
    optional: bool = False
    default: object = None
    help: str = ""
    choices: Sequence[object] | None = field(default=None)

    def __post_init__(self) -> None:
        if not self.dest.isidentifier():
            raise ValueError(f"positional name must be an identifier, got {self.dest!r}")


def dest_from_names(names: Sequence[str]) -> str:
    """--dry-run -> dry_run; falls back to the short name when there is no long one."""
    longs = [n for n in names if n.startswith("--")]
    chosen = longs[0][2:] if longs else names[0][1:]
    return chosen.replace("-", "_")
