"""The one error type, raised for bad files, bad overrides and schema violations."""


class ConfigError(ValueError):
    pass
