"""calcpy: parse and evaluate arithmetic expressions without eval()."""

from calcpy.errors import CalcError, EvaluationError, ParseError
from calcpy.evaluator import evaluate, evaluate_tree
from calcpy.parser import parse
from calcpy.printer import to_source

__all__ = ["CalcError", "EvaluationError", "ParseError", "evaluate", "evaluate_tree", "parse", "to_source"]
