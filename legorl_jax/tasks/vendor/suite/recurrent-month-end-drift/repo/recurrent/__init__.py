"""recurrent: expand recurrence rules into dates."""

from recurrent.describe import describe
from recurrent.iterate import between, occurrences
from recurrent.monthmath import add_months, days_in_month, is_leap_year
from recurrent.rule import Rule, RuleError, parse_rule

__all__ = [
    "Rule",
    "RuleError",
    "add_months",
    "between",
    "days_in_month",
    "describe",
    "is_leap_year",
    "occurrences",
    "parse_rule",
]
