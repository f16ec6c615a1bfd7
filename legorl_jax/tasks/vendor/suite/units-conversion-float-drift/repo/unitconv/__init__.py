"""Unit conversion with dimensional analysis."""

from unitconv.convert import convert
from unitconv.dimension import Dimension, DimensionError
from unitconv.parse import parse_unit
from unitconv.quantity import Quantity
from unitconv.registry import DEFAULT_REGISTRY, Registry, Unit

__all__ = ["DEFAULT_REGISTRY", "Dimension", "DimensionError", "Quantity", "Registry", "Unit",
           "convert", "parse_unit"]
__version__ = "0.6.0"
