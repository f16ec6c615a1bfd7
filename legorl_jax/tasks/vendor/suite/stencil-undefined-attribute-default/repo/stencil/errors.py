"""Template errors."""

from __future__ import annotations


class TemplateError(Exception):
    pass


class TemplateSyntaxError(TemplateError):
    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


class UndefinedError(TemplateError):
    """A template used a value that does not exist, in a way that needs one."""
