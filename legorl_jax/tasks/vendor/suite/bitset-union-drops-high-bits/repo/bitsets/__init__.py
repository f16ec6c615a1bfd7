"""Growable bitsets and named flag sets."""

from bitsets.bitset import Bitset
from bitsets.flags import FlagSet

__all__ = ["Bitset", "FlagSet"]
__version__ = "1.3.0"
