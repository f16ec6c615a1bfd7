"""stencil: Jinja-flavoured text templates."""

from stencil.environment import Environment, Template
from stencil.errors import TemplateError, TemplateSyntaxError, UndefinedError
from stencil.undefined import StrictUndefined, Undefined

__all__ = [
    "Environment",
    "StrictUndefined",
    "Template",
    "TemplateError",
    "TemplateSyntaxError",
    "Undefined",
    "UndefinedError",
]
