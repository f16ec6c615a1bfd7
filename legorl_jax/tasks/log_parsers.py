"""Log parsers: test output text → `{test id: status}`, by name (SWE-bench's `log_parser` field).

Names resolve in this order:

- `junit` and `harbor_reward` are the verifier's own modes (built-in tasks read a JUnit report, Harbor tasks a
  reward file); they are valid names but parse no log.
- When the `swebench` package is installed, every parser it ships is available under its own name
  (`parse_log_pytest`, `parse_log_django`, `parse_log_sympy`, ...), found through its parser registry
  (5.x `PARSER_REGISTRY`, or the `parse_log_*` functions of 4.x); with 4.x, a task without a `log_parser`
  gets the one swebench maps its repository to (5.x rows name theirs).
- Without swebench, `pytest` (alias `parse_log_pytest`, `parse_log_pytest_v2`) is ours: the `-rA`
  short-summary parser of `pytest_report`, which reads the same lines swebench's pytest parser reads; so is
  `parse_log_pytest_options` (the same, with a path-like parameter id cut to its last component, as swebench
  names those tests).

Any other name raises `UnknownParserError` (a `ValueError`) that lists the names available here, so a task
that needs swebench's Django parser on a machine without swebench fails at load time, not with a silent 0.
Statuses come back in `pytest_report.STATUSES` vocabulary (swebench's `PASSED`/`XFAIL`/... are mapped).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from collections.abc import Callable, Mapping

from legorl_jax.tasks.pytest_report import parse_pytest_log

LogParser = Callable[[str], dict[str, str]]
OWN_MODES = ("junit", "harbor_reward")
_OPTION_RE = re.compile(r"(.*?)\[(.*)\]")


def parse_pytest_options_log(text: str, known_ids: tuple[str, ...] = ()) -> dict[str, str]:
    """`-rA` lines, with a parameter id that is a path (`[/a/b/c.dcm]`, not `//`, no `*`) cut to
    `[/c.dcm]`."""
    out: dict[str, str] = {}
    for test, status in parse_pytest_log(text, known_ids).items():
        m = _OPTION_RE.fullmatch(test)
        if m is not None:
            main, option = m.groups()
            if option.startswith("/") and not option.startswith("//") and "*" not in option:
                test = f"{main}[/{option.split('/')[-1]}]"
        out[test] = status
    return out


_OURS: Mapping[str, LogParser] = {
    "pytest": parse_pytest_log,
    "parse_log_pytest": parse_pytest_log,
    "parse_log_pytest_v2": parse_pytest_log,
    "parse_log_pytest_options": parse_pytest_options_log,
}
_SWEBENCH_STATUS = {
    "PASSED": "passed",
    "FAILED": "failed",
    "ERROR": "error",
    "SKIPPED": "skipped",
    "XFAIL": "xfailed",
    "XPASS": "xpassed",
}


class UnknownParserError(ValueError):
    """No log parser of that name is available on this machine."""


@functools.cache
def _swebench_parsers() -> tuple[dict[str, Callable], dict[str, Callable]]:
    """(parsers by name, parser by repo) from an installed swebench, or two empty dicts."""
    try:
        package = importlib.import_module("swebench.harness.log_parsers")
    except ImportError:
        return {}, {}
    by_name: dict[str, Callable] = {}
    modules = [package]
    for info in pkgutil.iter_modules(getattr(package, "__path__", [])):
        try:
            modules.append(importlib.import_module(f"{package.__name__}.{info.name}"))
        except ImportError:
            continue
    for module in modules:
        for attr, value in vars(module).items():
            if attr.startswith("parse_log_") and callable(value):
                by_name[attr] = value
    registry = getattr(package, "PARSER_REGISTRY", None)
    if isinstance(registry, Mapping):
        by_name.update({str(k): v for k, v in registry.items() if callable(v)})
    by_repo = dict(getattr(package, "MAP_REPO_TO_PARSER", {}) or {})
    for module in modules:  # 5.x keeps one map per language (MAP_REPO_TO_PARSER_PY, ..._JS, ...)
        for attr, value in vars(module).items():
            if attr.startswith("MAP_REPO_TO_PARSER_") and isinstance(value, Mapping):
                by_repo.update(value)
    return by_name, by_repo


def available_parsers() -> list[str]:
    """Every name `resolve_log_parser` accepts here."""
    return sorted(set(OWN_MODES) | set(_OURS) | set(_swebench_parsers()[0]))


def swebench_parser_for_repo(repo: str) -> str | None:
    """The parser name the installed swebench maps `repo` to, or None (no swebench, or repo unknown to it)."""
    by_name, by_repo = _swebench_parsers()
    fn = by_repo.get(repo)
    if fn is not None:
        for name, candidate in by_name.items():
            if candidate is fn:
                return name
    return None


def check_parser_name(name: str) -> None:
    """Raises `UnknownParserError` unless `name` resolves here."""
    if name not in available_parsers():
        hint = "" if _swebench_parsers()[0] else " (install swebench for its repository-specific parsers)"
        raise UnknownParserError(f"unknown log parser {name!r}; available: {available_parsers()}{hint}")


def resolve_log_parser(name: str, known_ids: tuple[str, ...] = ()) -> LogParser:
    """The parser called `name`, returning statuses in our vocabulary."""
    check_parser_name(name)
    if name in OWN_MODES:
        raise UnknownParserError(f"{name!r} is a verifier mode, not a log parser")
    by_name = _swebench_parsers()[0]
    if name in by_name:
        fn = by_name[name]
        return lambda log: _normalise(fn(log, None))
    ours = _OURS[name]
    return lambda log: ours(log, known_ids)


def _normalise(raw: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for test, status in raw.items():
        value = getattr(status, "value", status)
        out[str(test)] = _SWEBENCH_STATUS.get(str(value).upper(), str(value).lower())
    return out
