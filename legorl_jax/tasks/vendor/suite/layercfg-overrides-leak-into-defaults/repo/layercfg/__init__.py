"""layercfg: merge defaults, files, environment and flags into one validated configuration."""

from layercfg.errors import ConfigError
from layercfg.loader import Config, Loader
from layercfg.merge import deep_merge, merge_layers
from layercfg.paths import get_path, set_path

__all__ = ["Config", "ConfigError", "Loader", "deep_merge", "get_path", "merge_layers", "set_path"]
