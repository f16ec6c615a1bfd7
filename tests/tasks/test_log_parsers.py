"""`log_parsers.read_stream`: a runner's merged output read line by line with the row's own parser, for every
parser SWE-bench names: the worst status a test is given anywhere wins, and a pass after a failure or a
listed test's status after the runner's closing line is reported; swebench's own logs read clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from legorl_jax.tasks.log_parsers import read_stream, resolve_log_parser
from legorl_jax.tasks.swebench_parsers import SWEBENCH_PARSERS

LOGS = Path(__file__).parents[1] / "fixtures" / "swebench_logs"
EXPECTED = json.loads((LOGS / "expected.json").read_text(encoding="utf-8"))
# Each runner shape: (its parser names, the failing line, a later passing line for the same test, the closing
# line, the test id the parser reads).
SHAPES = {
    "pytest": (
        [
            name
            for name, parser in SWEBENCH_PARSERS.items()
            if parser
            in (
                SWEBENCH_PARSERS["parse_log_pytest"],
                SWEBENCH_PARSERS["parse_log_pytest_options"],
                SWEBENCH_PARSERS["parse_log_pytest_v2"],
                SWEBENCH_PARSERS["parse_log_matplotlib"],
            )
        ]
        + ["pytest"],
        "FAILED tests/test_a.py::test_x - assert 1 == 2",
        "PASSED tests/test_a.py::test_x",
        "========================= 1 failed, 1 passed in 0.12s =========================",
        "tests/test_a.py::test_x",
    ),
    "seaborn": (
        ["parse_log_seaborn"],
        "FAILED tests/test_a.py::test_x",
        "PASSED tests/test_a.py::test_x",
        "========================= 1 failed, 1 passed in 0.12s =========================",
        "tests/test_a.py::test_x",
    ),
    "django": (
        ["parse_log_django"],
        "test_x (app.tests.T) ... FAIL",
        "test_x (app.tests.T) ... ok",
        "Ran 2 tests in 0.010s",
        "test_x (app.tests.T)",
    ),
    "sympy": (
        ["parse_log_sympy"],
        "test_x F",
        "test_x ok",
        "========== tests finished: 1 passed, 1 failed, in 0.10 seconds ==========",
        "test_x",
    ),
}
CASES = [(shape, name) for shape, spec in SHAPES.items() for name in spec[0]]


def test_every_parser_swebench_names_is_covered():
    assert {name for _, name in CASES} >= set(SWEBENCH_PARSERS)


@pytest.mark.parametrize(("shape", "parser"), CASES)
def test_a_pass_printed_after_a_failure_loses_and_is_reported(shape, parser):
    _, failing, passing, closing, test = SHAPES[shape]
    reading = read_stream(resolve_log_parser(parser), "\n".join([failing, closing, passing]) + "\n", {test})
    assert reading.statuses[test] == "failed"
    assert any("after failing on line 1" in p for p in reading.problems), reading.problems
    assert any("after the runner's closing line (line 2)" in p for p in reading.problems), reading.problems


@pytest.mark.parametrize(("shape", "parser"), CASES)
def test_a_listed_tests_status_after_the_closing_line_is_reported_without_a_failure_before(shape, parser):
    _, _, passing, closing, test = SHAPES[shape]
    reading = read_stream(resolve_log_parser(parser), f"{closing}\n{passing}\n", {test})
    assert reading.statuses[test] == "passed"
    assert reading.problems == (
        f"stream: statuses after the runner's closing line (line 1), which the runner does not print: "
        f"[{test!r}]",
    )


@pytest.mark.parametrize(("shape", "parser"), CASES)
def test_a_failure_after_a_pass_is_the_worst_status_and_not_a_forgery(shape, parser):
    _, failing, passing, closing, test = SHAPES[shape]
    reading = read_stream(resolve_log_parser(parser), "\n".join([passing, failing, closing]) + "\n", {test})
    assert reading.statuses[test] == "failed" and reading.problems == ()


# Each of swebench's example logs and the parsers of its runner's format.
OWN = {
    "django.log": ["parse_log_django"],
    "sympy.log": ["parse_log_sympy"],
    "matplotlib.log": ["parse_log_matplotlib"],
    "seaborn.log": ["parse_log_seaborn"],
    "sphinx.log": ["parse_log_pytest_v2"],
    "pytest_family.log": ["parse_log_pytest", "parse_log_pytest_options", "parse_log_pytest_v2"],
}


@pytest.mark.parametrize(("log", "parser"), [(log, parser) for log, per in OWN.items() for parser in per])
def test_swebench_logs_read_with_their_own_parser_report_nothing_and_keep_swebenchs_statuses(log, parser):
    text = (LOGS / log).read_text(encoding="utf-8")
    listed = set(EXPECTED["statuses"][log][parser])
    reading = read_stream(resolve_log_parser(parser), text, listed)
    assert reading.problems == ()
    ours = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped"}
    ours["XFAIL"] = "xfailed"
    assert reading.statuses == {t: ours[s] for t, s in EXPECTED["statuses"][log][parser].items()}
