"""The JUnit report, the -rA lines, the closing line and the exit code of a real pytest run agree, and
every way of forging one of them is caught by the cross-check."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from legorl_jax.tasks.pytest_report import (
    ReportError,
    cross_check,
    junit_key,
    parse_junit,
    parse_pytest_log,
    parse_summary,
    statuses_for,
)

TESTS = """
import pytest

def test_ok():
    pass

def test_bad():
    assert 1 == 2

@pytest.fixture
def boom():
    raise RuntimeError("setup")

def test_err(boom):
    pass

@pytest.mark.skip(reason="no")
def test_skip():
    pass

@pytest.mark.xfail
def test_xf():
    assert 0

class TestGroup:
    @pytest.mark.parametrize("v", ["a b", "c - d"])
    def test_p(self, v):
        assert v != "c - d"
"""
IDS = [
    f"tests/test_mix.py::{n}"
    for n in (
        "test_ok",
        "test_bad",
        "test_err",
        "test_skip",
        "test_xf",
        "TestGroup::test_p[a b]",
        "TestGroup::test_p[c - d]",
    )
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One real pytest session over a mix of outcomes: (junit bytes, stdout, exit code)."""
    root = tmp_path_factory.mktemp("proj")
    (root / "tests").mkdir()
    (root / "tests" / "test_mix.py").write_text(TESTS)
    junit = root / "report.xml"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rA",
            f"--junitxml={junit}",
            "-o",
            "junit_family=xunit2",
            "--rootdir",
            str(root),
            "tests",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    return junit.read_bytes(), proc.stdout, proc.returncode


def test_a_real_run_is_read_the_same_way_by_all_three_sources(run):
    junit, stdout, code = run
    report = parse_junit(junit)
    assert statuses_for(report, IDS) == {
        IDS[0]: "passed",
        IDS[1]: "failed",
        IDS[2]: "error",
        IDS[3]: "skipped",
        IDS[4]: "xfailed",
        IDS[5]: "passed",
        IDS[6]: "failed",
    }
    log = parse_pytest_log(stdout, IDS)
    assert log[IDS[5]] == "passed" and log[IDS[6]] == "failed" and IDS[3] not in log
    assert parse_summary(stdout) == {"failed": 2, "passed": 2, "skipped": 1, "xfailed": 1, "error": 1}
    assert code == 1
    assert cross_check(report, log, parse_summary(stdout), code, IDS) == []


def test_an_overwritten_report_claiming_every_test_passed_is_caught(run):
    junit, stdout, code = run
    forged = re.sub(rb"<(failure|error|skipped)[^>]*?(/>|>.*?</\1>)", b"", junit, flags=re.S)
    problems = cross_check(
        parse_junit(forged), parse_pytest_log(stdout, IDS), parse_summary(stdout), code, IDS
    )
    assert any("test_bad: the JUnit report says passed, the -rA output says failed" in p for p in problems)
    assert any("closing line counts 2 passed, the JUnit report 7" in p for p in problems)
    assert any("pytest exited 1" in p for p in problems)


def test_a_forced_zero_exit_code_is_caught(run):
    junit, stdout, _ = run
    problems = cross_check(parse_junit(junit), parse_pytest_log(stdout, IDS), parse_summary(stdout), 0, IDS)
    assert problems == ["pytest exited 0 but the JUnit report holds 3 failures/errors"]


def test_forged_stdout_lines_without_a_matching_report_are_caught(run):
    junit, stdout, code = run
    forged = stdout.replace(f"FAILED {IDS[1]}", f"PASSED {IDS[1]}")
    problems = cross_check(
        parse_junit(junit), parse_pytest_log(forged, IDS), parse_summary(forged), code, IDS
    )
    assert any(IDS[1] in p for p in problems)


def test_output_without_a_closing_line_is_a_problem(run):
    junit, stdout, code = run
    cut = "\n".join(stdout.splitlines()[:-1])
    problems = cross_check(parse_junit(junit), parse_pytest_log(cut, IDS), parse_summary(cut), code, IDS)
    assert problems == ["the output has no pytest closing line ('N passed in Xs')"]


def test_a_test_missing_from_the_report_but_passing_in_the_log_is_caught(run):
    junit, stdout, code = run
    forged = junit.replace(b'name="test_ok"', b'name="test_renamed"')
    problems = cross_check(
        parse_junit(forged), parse_pytest_log(stdout, IDS), parse_summary(stdout), code, IDS
    )
    assert f"{IDS[0]}: the JUnit report says missing, the -rA output says passed" in problems


def test_unusual_exit_codes_are_problems_even_when_everything_else_agrees(run):
    junit, stdout, _ = run
    problems = cross_check(parse_junit(junit), parse_pytest_log(stdout, IDS), parse_summary(stdout), 137, IDS)
    assert problems == ["pytest exited 137, which no normal test session produces"]


def test_junit_keys_follow_pytests_classname_rule():
    assert junit_key("tests/test_a.py::test_x") == ("tests.test_a", "test_x")
    assert junit_key("tests/sub/test_b.py::TestC::test_y[1-2]") == ("tests.sub.test_b.TestC", "test_y[1-2]")


def test_malformed_or_foreign_xml_is_a_report_error():
    from legorl_jax.tasks.pytest_report import ReportError

    with pytest.raises(ReportError, match="not well-formed"):
        parse_junit(b"<testsuites><testcase")
    with pytest.raises(ReportError, match="<html>"):
        parse_junit(b"<html/>")


def test_closing_lines_in_both_verbose_and_quiet_styles_parse():
    assert parse_summary("===== 3 passed, 1 warning in 0.12s =====") == {"passed": 3, "warnings": 1}
    assert parse_summary("1 failed, 2 errors in 1.00s (0:00:01)") == {"failed": 1, "error": 2}
    assert parse_summary("no tests ran in 0.01s") == {}
    assert parse_summary("all good") is None


# The JUnit report is a file the agent's code can write: entity expansion and external entities are refused.
@pytest.mark.parametrize(
    "xml",
    [
        b'<?xml version="1.0"?><!DOCTYPE t [<!ENTITY a "aaaaaaaaaa">'
        b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
        b'<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]><testsuites><testsuite>'
        b'<testcase classname="x" name="&c;"/>'
        b"</testsuite></testsuites>",
        b'<?xml version="1.0"?><!DOCTYPE t [<!ENTITY e SYSTEM "file:///etc/passwd">]><testsuites><testsuite>'
        b'<testcase classname="x" name="&e;"/></testsuite></testsuites>',
        b'<?xml version="1.0"?><!DOCTYPE testsuites SYSTEM "http://example.invalid/x.dtd"><testsuites/>',
    ],
    ids=["billion-laughs", "external-entity", "external-dtd"],
)
def test_a_report_with_a_dtd_or_entities_is_refused_not_expanded(xml):
    with pytest.raises(ReportError, match="forbidden XML construct"):
        parse_junit(xml)
