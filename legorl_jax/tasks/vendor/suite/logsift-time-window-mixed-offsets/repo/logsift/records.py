"""Record: one log entry, its continuation lines and where it came from."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Record:
    timestamp: str  # as written in the log, e.g. '2024-03-10T09:15:02.120+01:00'
    level: str  # canonical name, e.g. 'WARNING'
    levelno: int
    logger: str
    message: str
    source: str = "-"
    line: int = 0
    extra: list[str] = field(default_factory=list)  # continuation lines, verbatim

    def text(self) -> str:
        """The record's original lines."""
        head = f"{self.timestamp} {self.level} [{self.logger}] {self.message}"
        return "\n".join([head, *self.extra])

    def searchable(self) -> str:
        return "\n".join([self.message, *self.extra])

    def as_json(self) -> dict[str, object]:
        return {
            "time": self.timestamp,
            "level": self.level,
            "logger": self.logger,
            "message": self.message,
            "extra": list(self.extra),
            "source": self.source,
            "line": self.line,
        }
