"""The error for text that is not a duration in the expected notation."""


class DurationError(ValueError):
    pass
