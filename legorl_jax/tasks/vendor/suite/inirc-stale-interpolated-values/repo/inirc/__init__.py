"""inirc: INI configuration with interpolation."""

from inirc.config import Config
from inirc.errors import DuplicateError, InterpolationError, ParseError
from inirc.parser import parse

__all__ = ["Config", "DuplicateError", "InterpolationError", "ParseError", "parse"]
