"""Exceptions of the routes package."""


class NoPath(LookupError):
    def __init__(self, source, target) -> None:
        super().__init__(f"no path from {source!r} to {target!r}")
        self.source = source
        self.target = target
