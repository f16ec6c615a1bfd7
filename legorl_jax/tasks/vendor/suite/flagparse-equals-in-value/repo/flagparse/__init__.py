"""flagparse: typed command-line options, positionals and generated help."""

from flagparse.errors import UsageError
from flagparse.parser import Namespace, Parser
from flagparse.spec import Option, Positional

__all__ = ["Namespace", "Option", "Parser", "Positional", "UsageError"]
