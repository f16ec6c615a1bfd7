"""Log parsers: test output text → `{test id: status}`, by name (SWE-bench's `log_parser` field).

Names resolve in this order:

- `junit` and `harbor_reward` are the verifier's own modes (built-in tasks read a JUnit report, Harbor tasks a
  reward file); they are valid names but parse no log.
- Every Python parser of SWE-bench (`parse_log_pytest`, `parse_log_django`, `parse_log_sympy`,
  `parse_log_pytest_v2`, ... and the per-repository names such as `parse_log_flask`) is ours
  (`swebench_parsers.py`, proven to give swebench 5.0.2's statuses on its logs), so every repository of
  SWE-bench, Lite and Verified grades in the default install.
- When the `swebench` package is installed, every parser it ships is available under its own name (those of
  other languages too: `parse_log_jest`, `parse_log_cargo`, ...), found through its parser registry (5.x
  `PARSER_REGISTRY`, or the `parse_log_*` functions of 4.x), and is used for its name; with 4.x, a task
  without a `log_parser` gets the one swebench maps its repository to (5.x rows name theirs).
- `pytest` is ours for the built-in tasks: the `-rA` parser of `pytest_report`, which keeps ids holding
  ` - ` whole when it knows them and reports the worse status of a test listed twice.

Any other name raises `UnknownParserError` (a `ValueError`) that lists the names available here, so a task
that needs swebench's Jest parser on a machine without swebench fails at load time, not with a silent 0.
Statuses come back in `pytest_report.STATUSES` vocabulary (swebench's `PASSED`/`XFAIL`/... are mapped).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
import re
from collections.abc import Callable, Collection, Mapping

from legorl_jax.tasks.pytest_report import parse_pytest_log
from legorl_jax.tasks.swebench_parsers import SWEBENCH_PARSERS

LogParser = Callable[[str], dict[str, str]]
OWN_MODES = ("junit", "harbor_reward")
_OURS: Mapping[str, Callable[[str, tuple[str, ...]], dict[str, str]]] = {"pytest": parse_pytest_log}
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
    return sorted(set(OWN_MODES) | set(_OURS) | set(SWEBENCH_PARSERS) | set(_swebench_parsers()[0]))


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
        hint = "" if _swebench_parsers()[0] else " (install swebench for the parsers of other languages)"
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
    if name in SWEBENCH_PARSERS:
        port = SWEBENCH_PARSERS[name]
        return lambda log: _normalise(port(log))
    ours = _OURS[name]
    return lambda log: ours(log, known_ids)


def _normalise(raw: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for test, status in raw.items():
        value = getattr(status, "value", status)
        out[str(test)] = _SWEBENCH_STATUS.get(str(value).upper(), str(value).lower())
    return out


# The closing line of each runner SWE-bench's parsers read: pytest's counts, unittest's (Django's runtests.py)
# `Ran N tests in Xs`, sympy's `tests finished: ...`. A test's status after the last of them is not the
# runner's: it prints nothing about a test once it has summed the run up.
_RUN_SUMMARY_RE = re.compile(
    r"^(?:=*\s*(?:(?:\d+ [a-z]+,? ?)+|no tests ran) in [0-9.]+ ?s(?:econds)?\b.*"
    r"|Ran \d+ tests? in [0-9.]+s|=*\s*tests finished: .* in [0-9.]+ seconds\s*=*)\s*$"
)
_BAD = frozenset({"failed", "error"})
_GOOD = frozenset({"passed", "xpassed", "skipped", "xfailed"})


@dataclasses.dataclass(frozen=True)
class StreamReading:
    """A runner's merged output read line by line: the worst status each test was given anywhere, and every
    sign that something other than the runner wrote statuses into it."""

    statuses: dict[str, str]
    problems: tuple[str, ...]


def read_stream(parse: LogParser, log: str, tests: Collection[str] | None = None) -> StreamReading:
    """The statuses `parse` gives `log` as a whole (as swebench grades), each made the worst status any single
    line gives that test, and the problems of the stream:

    - a test given a failing status (`failed`/`error`) on one line and a passing or skipping one on a later
      line: no runner SWE-bench names does that (pytest's `-rA` lists passes before errors and failures;
      unittest and sympy print one status a test), while swebench's parsers let the last line win;
    - a test's status after the runner's own closing line (pytest's counts, unittest's `Ran N tests`, sympy's
      `tests finished`), which the runner never prints.

    Each line is parsed alone with the same parser, so every parser's own line shapes count. With `tests`
    (the listed tests), only their statuses count as late: what another runner prints after its closing line
    (unittest's `FAILED (failures=2)`) reads as a status to a parser of another format."""
    whole = parse(log)
    statuses = dict(whole)
    problems: list[str] = []
    first_bad: dict[str, int] = {}
    flagged: set[str] = set()
    lines = log.split("\n")
    summaries = [i for i, line in enumerate(lines) if _RUN_SUMMARY_RE.match(line.strip())]
    last_summary = summaries[-1] if summaries else None
    late: list[str] = []
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        for test, status in parse(line).items():
            statuses[test] = _worst(statuses.get(test), status)
            if status in _BAD:
                first_bad.setdefault(test, number)
            elif status in _GOOD and test in first_bad and test not in flagged:
                flagged.add(test)
                problems.append(
                    f"stream: {test} is reported {status} on output line {number + 1} after failing on line "
                    f"{first_bad[test] + 1}: a second status, which would win under swebench's parser"
                )
            if last_summary is not None and number > last_summary and (tests is None or test in tests):
                late.append(test)
    if late and last_summary is not None:
        problems.append(
            f"stream: statuses after the runner's closing line (line {last_summary + 1}), which the runner "
            f"does not print: {sorted(set(late))[:5]}"
        )
    return StreamReading(statuses, tuple(problems))


def _worst(old: str | None, new: str) -> str:
    order = ("error", "failed", "xpassed", "passed", "xfailed", "skipped")
    if old is None or old not in order:
        return new
    if new not in order:
        return old
    return old if order.index(old) <= order.index(new) else new
