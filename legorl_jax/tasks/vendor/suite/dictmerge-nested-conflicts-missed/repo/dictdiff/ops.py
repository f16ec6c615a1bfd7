"""Op: one change to a document, in JSON Patch vocabulary (add, remove, replace)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KINDS = ("add", "remove", "replace")
_NO_VALUE = object()


@dataclass(frozen=True)
class Op:
    op: str
    path: str
    value: Any = None

    def __post_init__(self) -> None:
        if self.op not in KINDS:
            raise ValueError(f"op must be one of {KINDS}, got {self.op!r}")
        if not isinstance(self.path, str) or (self.path and not self.path.startswith("/")):
            raise ValueError(f"op path must be a JSON Pointer, got {self.path!r}")

    def to_dict(self) -> dict[str, Any]:
        out = {"op": self.op, "path": self.path}
        if self.op != "remove":
            out["value"] = self.value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Op:
        try:
            kind, path = data["op"], data["path"]
        except (KeyError, TypeError):
            raise ValueError(f"an op needs 'op' and 'path', got {data!r}") from None
        value = data.get("value", _NO_VALUE)
        if kind != "remove" and value is _NO_VALUE:
            raise ValueError(f"{kind!r} op at {path!r} needs a 'value'")
        return cls(kind, path, None if value is _NO_VALUE else value)
