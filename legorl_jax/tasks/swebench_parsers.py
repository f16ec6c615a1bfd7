"""SWE-bench's Python log parsers, ours: the statuses swebench 5.0.2 grades with, without installing swebench.

    statuses = SWEBENCH_PARSERS["parse_log_django"](log)   # {test id: "PASSED" | "FAILED" | ...}

Every parser that the Python repositories of SWE-bench, Lite, Verified, SWE-Gym and SWE-rebench name is here
under swebench's own name (`swebench.harness.log_parsers.python`, 5.0.2), with its quirks kept on purpose:
grading must give the statuses the data set's FAIL_TO_PASS / PASS_TO_PASS lists were made with, even where a
parser is lenient (a wrapped progress line's `[100%]` is an id in two pytest-dev instances' lists). They
return swebench's status words; `log_parsers` maps them to ours. `tests/tasks/test_swebench_parsers.py` checks
each against swebench's own output on the logs in `tests/fixtures/swebench_logs/` (produced by
`tools/make_swebench_parser_fixtures.py` from the real package, so the suite needs no swebench).

The formats: pytest's `-rA` short summary (`STATUS id`, FAILED with ` - message`); the `pytest_v2` family
(astropy, scikit-learn, sphinx) also strips colour codes and control characters and reads `id STATUS` lines of
older pytest; Django's runner at verbosity 2 (`test (module.Class) ... ok`, with its multi-line outputs);
sympy's `bin/test` (`test_name ok|F|E`, and `____ file.py:test ____` headers of failures); seaborn's
verbose lines; matplotlib's summary with `MouseButton.LEFT/RIGHT` spelled as swebench's lists spell them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

STATUS_WORDS = ("FAILED", "PASSED", "SKIPPED", "ERROR", "XFAIL")  # swebench's TestStatus, in its order
PASSED, FAILED, SKIPPED, ERROR = "PASSED", "FAILED", "SKIPPED", "ERROR"
_SKIP_COUNT_RE = re.compile(r"^\[\d+\]$")
_OPTION_RE = re.compile(r"(.*?)\[(.*)\]")
_COLOUR_RE = re.compile(r"\[(\d+)m")
_CONTROL = str.maketrans("", "", "".join(chr(c) for c in range(1, 32)))
_SYMPY_FAILURE_RE = re.compile(r"(_*) (.*)\.py:(.*) (_*)")
# Django's logger sometimes prints a long multi-line message between a test's " ... " and its "ok".
_DJANGO_SPLIT_OK = (
    re.compile(
        r"^(.*?)\s\.\.\.\sTesting\ against\ Django\ installed\ in\ ((?s:.*?))\ silenced\)\.\nok$", re.M
    ),
    re.compile(r"^(.*?)\s\.\.\.\sInternal\ Server\ Error:\ \/(.*)\/\nok$", re.M),
    re.compile(r"^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$", re.M),
)


def _starts_with_status(line: str) -> bool:
    return line.startswith(STATUS_WORDS)


def _is_skip_count(word: str, name: str) -> bool:
    """pytest's `SKIPPED [N] path:line: reason` summary: `[N]` is a count, not a test id."""
    return word == SKIPPED and bool(_SKIP_COUNT_RE.match(name))


def _summary_words(line: str) -> list[str] | None:
    """The words of a `-rA` summary line (a FAILED line's ` - ` separators dropped), or None to skip it."""
    if not _starts_with_status(line):
        return None
    if line.startswith(FAILED):
        line = line.replace(" - ", " ")
    words = line.split()
    if len(words) <= 1 or _is_skip_count(words[0], words[1]):
        return None
    return words


def parse_log_pytest(log: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in log.split("\n"):
        words = _summary_words(line)
        if words is not None:
            out[words[1]] = words[0]
    return out


def parse_log_pytest_options(log: str) -> dict[str, str]:
    """`parse_log_pytest`, with a parameter that is a path (`[/a/b/c.dcm]`, not `//`, no `*`) cut to
    `[/c.dcm]`."""
    out: dict[str, str] = {}
    for line in log.split("\n"):
        words = _summary_words(line)
        if words is None:
            continue
        name = words[1]
        m = _OPTION_RE.search(name)
        if m is not None:
            main, option = m.groups()
            if option.startswith("/") and not option.startswith("//") and "*" not in option:
                option = "/" + option.split("/")[-1]
            name = f"{main}[{option}]"
        out[name] = words[0]
    return out


def parse_log_pytest_v2(log: str) -> dict[str, str]:
    """Ids may hold spaces (the whole rest of the line, a FAILED line's message cut at ` - `); colour codes
    and control characters are dropped; older pytest's `id STATUS` lines count too."""
    out: dict[str, str] = {}
    for line in log.split("\n"):
        line = _COLOUR_RE.sub("", line).translate(_CONTROL)
        if _starts_with_status(line):
            if line.startswith(FAILED):
                line = line.split(" - ", 1)[0]
            words = line.split()
            if len(words) >= 2 and not _is_skip_count(words[0], words[1]):
                out[" ".join(words[1:])] = words[0]
        elif line.endswith(STATUS_WORDS):
            words = line.split()
            if len(words) >= 2:
                out[" ".join(words[:-1])] = words[-1]
    return out


def parse_log_django(log: str) -> dict[str, str]:
    out: dict[str, str] = {}
    previous = None
    for line in log.split("\n"):
        line = line.strip()
        if "--version is equivalent to version" in line:
            out["--version is equivalent to version"] = PASSED
        if " ... " in line:
            previous = line.split(" ... ")[0]
        for suffix in (" ... ok", " ... OK", " ...  OK"):
            if line.endswith(suffix):
                # django__django-7188 prints a migration line before the test on the same line.
                if line.startswith("Applying sites.0002_alter_domain_unique...test_no_migrations"):
                    line = line.split("...", 1)[-1].strip()
                out[line.rsplit(suffix, 1)[0]] = PASSED
                break
        if " ... skipped" in line:
            out[line.split(" ... skipped")[0]] = SKIPPED
        if line.endswith(" ... FAIL"):
            out[line.split(" ... FAIL")[0]] = FAILED
        if line.startswith("FAIL:"):
            out[line.split()[1].strip()] = FAILED
        if line.endswith(" ... ERROR"):
            out[line.split(" ... ERROR")[0]] = ERROR
        if line.startswith("ERROR:"):
            out[line.split()[1].strip()] = ERROR
        if line.lstrip().startswith("ok") and previous is not None:
            out[previous] = PASSED  # the test printed between its " ... " and its "ok"
    for pattern in _DJANGO_SPLIT_OK:
        for m in pattern.finditer(log):
            out[m.group(1)] = PASSED
    return out


def parse_log_seaborn(log: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in log.split("\n"):
        words = line.split()
        if len(words) < 2:
            continue
        if line.startswith(FAILED):
            out[words[1]] = FAILED
        elif f" {PASSED} " in line:
            if words[1] == PASSED:
                out[words[0]] = PASSED
        elif line.startswith(PASSED):
            out[words[1]] = PASSED
    return out


def parse_log_sympy(log: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in _SYMPY_FAILURE_RE.findall(log):
        out[f"{m[1]}.py:{m[2]}"] = FAILED
    for line in log.split("\n"):
        line = line.strip()
        if not line.startswith("test_"):
            continue
        if line.endswith(" E"):
            out[line.split()[0]] = ERROR
        if line.endswith(" F"):
            out[line.split()[0]] = FAILED
        if line.endswith(" ok"):
            out[line.split()[0]] = PASSED
    return out


def parse_log_matplotlib(log: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in log.split("\n"):
        line = line.replace("MouseButton.LEFT", "1").replace("MouseButton.RIGHT", "3")
        words = _summary_words(line)
        if words is not None:
            out[words[1]] = words[0]
    return out


SWEBENCH_PARSERS: Mapping[str, Callable[[str], dict[str, str]]] = {
    "parse_log_pytest": parse_log_pytest,
    "parse_log_pytest_options": parse_log_pytest_options,
    "parse_log_pytest_v2": parse_log_pytest_v2,
    "parse_log_django": parse_log_django,
    "parse_log_seaborn": parse_log_seaborn,
    "parse_log_sympy": parse_log_sympy,
    "parse_log_matplotlib": parse_log_matplotlib,
    # swebench's per-repository names for the same functions
    **dict.fromkeys(
        (
            "parse_log_astroid",
            "parse_log_flask",
            "parse_log_marshmallow",
            "parse_log_pvlib",
            "parse_log_pyvista",
            "parse_log_sqlfluff",
            "parse_log_xarray",
        ),
        parse_log_pytest,
    ),
    **dict.fromkeys(
        ("parse_log_pydicom", "parse_log_requests", "parse_log_pylint"), parse_log_pytest_options
    ),
    **dict.fromkeys(("parse_log_astropy", "parse_log_scikit", "parse_log_sphinx"), parse_log_pytest_v2),
}
