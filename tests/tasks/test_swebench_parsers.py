"""Our SWE-bench log parsers give swebench 5.0.2's statuses, on every log, through the path grading takes.

The expected statuses in tests/fixtures/swebench_logs/expected.json are swebench's own output (written by
tools/make_swebench_parser_fixtures.py from the real package), so a difference here is a grade that would
differ from the official one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from legorl_jax.tasks.log_parsers import available_parsers, resolve_log_parser
from legorl_jax.tasks.swebench import load_swebench_file, spec_table
from legorl_jax.tasks.swebench_parsers import SWEBENCH_PARSERS

LOGS = Path(__file__).parents[1] / "fixtures" / "swebench_logs"
EXPECTED = json.loads((LOGS / "expected.json").read_text(encoding="utf-8"))
LITE = Path(__file__).parents[1] / "fixtures" / "swebench_lite" / "lite_one_per_repo.jsonl"
# swebench's status words in the verifier's vocabulary (pytest_report.STATUSES)
OURS = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped", "XFAIL": "xfailed"}
CASES = [(log, parser) for log, per in sorted(EXPECTED["statuses"].items()) for parser in sorted(per)]


def read_log(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


def test_the_expected_statuses_come_from_swebench_5_0_2_and_cover_every_log():
    assert EXPECTED["swebench"] == "5.0.2"
    assert sorted(EXPECTED["statuses"]) == sorted(p.name for p in LOGS.glob("*.log"))


@pytest.mark.parametrize(("log", "parser"), CASES)
def test_our_parser_gives_swebench_statuses_on_every_log(log, parser):
    assert SWEBENCH_PARSERS[parser](read_log(log)) == EXPECTED["statuses"][log][parser]


@pytest.mark.parametrize(
    ("repo", "log"),
    [
        ("django/django", "django.log"),
        ("sympy/sympy", "sympy.log"),
        ("sphinx-doc/sphinx", "sphinx.log"),
        ("matplotlib/matplotlib", "matplotlib.log"),
    ],
)
def test_example_logs_of_django_sympy_sphinx_and_matplotlib_grade_as_swebench_through_our_path(repo, log):
    # Our path: the loader picks the row's parser (no swebench installed), the verifier resolves it by name.
    (task,) = [t for t in load_swebench_file(LITE) if t.repo == repo]
    official = EXPECTED["statuses"][log][EXPECTED["repo_parsers"][repo]]
    ours = resolve_log_parser(task.log_parser, task.tests)(read_log(log))
    assert ours == {test: OURS[status] for test, status in official.items()}
    assert {"passed", "failed"} <= set(ours.values())  # a log that grades something either way


def test_the_spec_table_maps_every_python_repository_to_swebench_5_parser():
    table = spec_table()["log_parser"]
    for repo, name in EXPECTED["repo_parsers"].items():
        assert SWEBENCH_PARSERS[table[repo]] is SWEBENCH_PARSERS[name], repo
        assert table[repo] in available_parsers()


def test_sympy_failures_are_read_from_their_headers_not_from_a_line_ending_in_the_file_column():
    # Worked by hand from sympy's bin/test output: "test_b E   [FAIL]" ends in the file's status column,
    # so only the "____ file.py:test_b ____" header marks it; a parser that read the column would call
    # test_b failed under its bare name too.
    log = (
        "sympy/core/tests/test_x.py[2] \ntest_a ok\ntest_b E                                   [FAIL]\n"
        "______________________ sympy/core/tests/test_x.py:test_b ______________________\n"
    )
    assert SWEBENCH_PARSERS["parse_log_sympy"](log) == {
        "test_a": "PASSED",
        "sympy/core/tests/test_x.py:test_b": "FAILED",
    }


def test_the_built_in_pytest_parser_stays_ours_and_swebench_names_take_swebench_rules():
    log = "PASSED t.py::test_p[a - b]\nPASSED [100%]\n"
    assert resolve_log_parser("pytest", ("t.py::test_p[a - b]",))(log) == {"t.py::test_p[a - b]": "passed"}
    # swebench keeps the first word as the id, and keeps "[100%]" (pytest-dev__pytest-5262's lists name it).
    assert resolve_log_parser("parse_log_pytest")(log) == {"t.py::test_p[a": "passed", "[100%]": "passed"}
