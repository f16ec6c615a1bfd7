"""Reading pytest's results three ways and checking that they agree (the verifier's anti-spoofing core).

A pytest run leaves three independent traces of what happened:

1. the JUnit XML report it writes at the end of the session (`parse_junit`);
2. the `-rA` short summary lines in its stdout (`PASSED id`, `FAILED id - msg`, `ERROR id`, `XFAIL id`,
   `XPASS id`; `parse_pytest_log`), which the verifier reads from the exec pipe, so nothing the tests do
   afterwards can take them back;
3. its exit code, and the closing count line (`2 failed, 5 passed in 0.31s`, `parse_summary`).

Code that the agent wrote runs inside that process and can overwrite the report file (an `atexit` hook, a
`pytest_sessionfinish` hook, a forked writer) or force the exit code, but it cannot make the already
written stdout say the same thing unless it forges all three consistently. `cross_check` compares them
and returns every disagreement; the verifier turns any disagreement into reward 0, reported as tampering.
Forging all three consistently is possible from inside the process (patch pytest's report objects); the
verifier's canary test, which must come out `failed`, is the check for that.

Statuses use one vocabulary: passed, failed, error, skipped, xfailed, xpassed (and `missing` for a listed
test nobody reported). Node ids map to JUnit `(classname, name)` the way pytest builds them: the path part
with `/` → `.` and `.py` dropped, joined with the class parts; the last `::` part is the name.
"""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping

import defusedxml
import defusedxml.ElementTree as SafeET

STATUSES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
_OUTCOME_CLASS = {
    "passed": "ok",
    "xpassed": "ok",
    "failed": "bad",
    "error": "bad",
    "skipped": "skip",
    "xfailed": "skip",
}
_LOG_LINE_RE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (\S.*?)\s*$")
_LOG_STATUS = {
    "PASSED": "passed",
    "FAILED": "failed",
    "ERROR": "error",
    "XFAIL": "xfailed",
    "XPASS": "xpassed",
}
_SUMMARY_RE = re.compile(
    r"^=*\s*(?P<body>(?:\d+ [a-z]+(?:, )?)+|no tests ran) in [0-9.]+s(?: \([^)]*\))?\s*=*\s*$"
)
_SUMMARY_WORDS = {
    "passed": "passed",
    "failed": "failed",
    "error": "error",
    "errors": "error",
    "skipped": "skipped",
    "xfailed": "xfailed",
    "xpassed": "xpassed",
    "deselected": "deselected",
    "warning": "warnings",
    "warnings": "warnings",
    "rerun": "rerun",
}
# Pytest's exit codes: 0 all passed, 1 some failed, 2 interrupted (e.g. collection errors), 5 nothing
# collected.
EXIT_OK, EXIT_TESTS_FAILED, EXIT_INTERRUPTED, EXIT_NO_TESTS = 0, 1, 2, 5


class ReportError(ValueError):
    """A JUnit report that cannot be read as one."""


@dataclasses.dataclass(frozen=True)
class JUnitReport:
    """Per-testcase statuses keyed by `(classname, name)`, and the counts of result elements."""

    cases: Mapping[tuple[str, str], str]
    failures: int
    errors: int
    skipped: int
    passed: int


def junit_key(node_id: str) -> tuple[str, str]:
    """The `(classname, name)` pytest's JUnit writer gives the test `node_id`."""
    names = node_id.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    return ".".join(names[:-1]), names[-1]


def parse_junit(xml_bytes: bytes) -> JUnitReport:
    """Reads a pytest JUnit XML report (xunit1 or xunit2).

    The file is written where code of the agent's runs, so it is parsed with `defusedxml`: a DTD, an entity
    declaration (billion laughs) or an external entity is refused (`ReportError`), never expanded or fetched.
    """
    try:
        root = SafeET.fromstring(xml_bytes, forbid_dtd=True)
    except ET.ParseError as err:
        raise ReportError(f"the JUnit report is not well-formed XML: {err}") from None
    except defusedxml.DefusedXmlException as err:
        raise ReportError(
            f"the JUnit report holds a forbidden XML construct ({type(err).__name__}: {err})"
        ) from None
    if root.tag not in ("testsuites", "testsuite"):
        raise ReportError(f"the JUnit report's root element is <{root.tag}>, not <testsuites>/<testsuite>")
    cases: dict[tuple[str, str], str] = {}
    failures = errors = skipped = passed = 0
    for case in root.iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        failures += kinds.count("failure")
        errors += kinds.count("error")
        if "error" in kinds:
            status = "error"
        elif "failure" in kinds:
            status = "failed"
        elif "skipped" in kinds:
            skip = case.find("skipped")
            status = "xfailed" if skip is not None and skip.get("type") == "pytest.xfail" else "skipped"
            skipped += 1
        else:
            status = "passed"
            passed += 1
        key = (case.get("classname", ""), case.get("name", ""))
        # A test reported twice (call failure + teardown error) keeps its worst outcome.
        cases[key] = _worse(cases.get(key), status)
    return JUnitReport(cases, failures, errors, skipped, passed)


def parse_pytest_log(text: str, known_ids: Iterable[str] = ()) -> dict[str, str]:
    """Statuses from `-rA` short-summary lines, keyed by node id; SKIPPED lines carry no id and are left out.

    A line is `WORD <id>` optionally followed by ` - <message>` (FAILED, ERROR, XFAIL) or ` <reason>`
    (XPASS). Ids may contain spaces and ` - ` inside their parameter brackets, so the longest of
    `known_ids` that the line starts with wins; without a match the id ends at the first separator.
    """
    known = sorted(set(known_ids), key=len, reverse=True)
    out: dict[str, str] = {}
    for line in text.split("\n"):
        m = _LOG_LINE_RE.match(line.rstrip("\r"))
        if m is None or m.group(1) == "SKIPPED":
            continue
        word, rest = m.groups()
        node_id = next((k for k in known if rest == k or rest.startswith(k + " ")), None)
        if node_id is None:
            node_id = _split_id(rest)
        if "::" in node_id or node_id.endswith(".py"):
            out[node_id] = _worse(out.get(node_id), _LOG_STATUS[word])
    return out


def _split_id(rest: str) -> str:
    # An id's parameter part "[...]" may hold spaces; otherwise the id is the first word.
    head = rest.split(" ", 1)[0]
    if "[" in head and not head.endswith("]"):
        close = rest.find("]", len(head))
        if close != -1:
            return rest[: close + 1]
    return head


def parse_summary(text: str) -> dict[str, int] | None:
    """Counts from the last closing line (`1 failed, 3 passed in 0.05s`), or None when there is none."""
    for line in reversed(text.split("\n")):
        m = _SUMMARY_RE.match(line.strip())
        if m is None:
            continue
        counts: dict[str, int] = {}
        if m.group("body") != "no tests ran":
            for part in m.group("body").split(", "):
                number, word = part.split(" ", 1)
                key = _SUMMARY_WORDS.get(word)
                if key is None:
                    break
                counts[key] = counts.get(key, 0) + int(number)
            else:
                return counts
            continue
        return counts
    return None


def statuses_for(report: JUnitReport, node_ids: Iterable[str]) -> dict[str, str]:
    """The JUnit status of each listed node id (`missing` when the report has no such testcase)."""
    return {nid: report.cases.get(junit_key(nid), "missing") for nid in node_ids}


def cross_check(
    report: JUnitReport,
    log_statuses: Mapping[str, str],
    summary: Mapping[str, int] | None,
    exit_code: int,
    node_ids: Iterable[str],
) -> list[str]:
    """Every way the JUnit report, the `-rA` lines, the closing counts and the exit code disagree."""
    problems: list[str] = []
    for nid, status in statuses_for(report, node_ids).items():
        logged = log_statuses.get(nid)
        junit_class = _OUTCOME_CLASS.get(status, "missing")
        log_class = _OUTCOME_CLASS[logged] if logged else None
        if junit_class in ("ok", "bad") and log_class != junit_class:
            problems.append(
                f"{nid}: the JUnit report says {status}, the -rA output says {logged or 'nothing'}"
            )
        elif junit_class in ("skip", "missing") and log_class in ("ok", "bad"):
            problems.append(f"{nid}: the JUnit report says {status}, the -rA output says {logged}")
    if summary is None:
        problems.append("the output has no pytest closing line ('N passed in Xs')")
    else:
        expected = {
            "passed": report.passed,
            "failed": report.failures,
            "error": report.errors,
            "skipped": report.skipped,
        }
        actual = {
            "passed": summary.get("passed", 0) + summary.get("xpassed", 0),
            "failed": summary.get("failed", 0),
            "error": summary.get("error", 0),
            "skipped": summary.get("skipped", 0) + summary.get("xfailed", 0),
        }
        for key, value in expected.items():
            if actual[key] != value:
                problems.append(f"the closing line counts {actual[key]} {key}, the JUnit report {value}")
    bad = report.failures + report.errors
    if exit_code == EXIT_OK and bad:
        problems.append(f"pytest exited 0 but the JUnit report holds {bad} failures/errors")
    elif exit_code in (EXIT_TESTS_FAILED, EXIT_INTERRUPTED) and not bad:
        problems.append(f"pytest exited {exit_code} (tests failed) but the JUnit report holds no failure")
    elif exit_code == EXIT_NO_TESTS and report.cases:
        problems.append(
            f"pytest exited 5 (no tests collected) but the JUnit report holds {len(report.cases)} tests"
        )
    elif exit_code not in (EXIT_OK, EXIT_TESTS_FAILED, EXIT_INTERRUPTED, EXIT_NO_TESTS):
        problems.append(f"pytest exited {exit_code}, which no normal test session produces")
    return problems


def _worse(old: str | None, new: str) -> str:
    order = ("error", "failed", "xpassed", "passed", "xfailed", "skipped")
    if old is None:
        return new
    return old if order.index(old) <= order.index(new) else new
