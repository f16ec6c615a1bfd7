"""The round-4 red team (issue 39) on SWE-bench-format rows of every runner shape SWE-bench's parsers read
(pytest read by our parser and by swebench's, in the fixture's `python -m pytest` shape and swebench's
`set-up && pytest` shape; Django's runtests.py, whose statuses are on stderr; sympy's bin/test) and on a
Harbor task, graded for real on Docker and on bubblewrap (`slow`: it exports the images' root filesystems
first). Every forgery scores 0 and the report names what caught it; gold still scores 1 and the
empty diff 0 on every row."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil

import pytest
from harbor_fixture import GOLD_DIFF, write_harbor_task
from round4_attacks import (
    FORGED_ON_STDOUT_FIRST,
    FORGES_THE_MARKERS,
    HARBOR,
    HARBOR_FRESH,
    LAST_LINE,
    REWRITES,
    REWRITES_A_TEST_FILE,
    forged,
)
from runner_rows import GOLD as RUNNER_GOLD
from runner_rows import build_runner_image, write_runner_jsonl
from swebench_fixture import GOLD as CALC_GOLD
from swebench_fixture import REPO as CALC_REPO
from swebench_fixture import build_swebench_image, write_jsonl

from legorl_jax.config import VerifierConfig
from legorl_jax.sandbox import images
from legorl_jax.tasks.harbor import load_harbor_task
from legorl_jax.tasks.report import VerifierReport
from legorl_jax.tasks.swebench import load_swebench_file
from legorl_jax.tasks.task_image import ensure_task_image
from legorl_jax.tasks.verifier import grade_many

pytestmark = pytest.mark.docker  # the images are built with Docker on either backend

SET_UP_AND_PYTEST = (
    "cd /testbed && export PYTHONPATH=/testbed && pytest -rA -p no:cacheprovider tests/test_add.py "
    "tests/test_sub.py"
)
# Each row: how to make its task from the built images, and the runner shape its forged lines take.
ROWS = {
    "pytest-ours": "pytest",
    "pytest-swebench-parser": "pytest",
    "pytest-set-up-shape": "pytest",
    "django": "django",
    "sympy": "sympy",
}


@pytest.fixture(
    scope="module", params=["docker", pytest.param("bwrap", marks=pytest.mark.slow)], ids=["docker", "bwrap"]
)
def config(request):
    """Grading on one backend. Bubblewrap runs the grading sandboxes itself; the daemon only exports each
    image's root filesystem to it once (as on any host whose tasks come as Docker images)."""
    if request.param == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed on this host (tools/system_setup.sh installs it)")
    return VerifierConfig(concurrency=3, backend=request.param)


_BUILT: dict[str, object] = {}


def _images(tmp_path_factory):
    if "rows" not in _BUILT:
        image, base = build_swebench_image()
        (calc,) = load_swebench_file(
            write_jsonl(tmp_path_factory.mktemp("jsonl") / "calc.jsonl", image, base)
        )
        rows = {
            "pytest-ours": calc,
            "pytest-swebench-parser": dataclasses.replace(calc, log_parser="parse_log_pytest"),
            "pytest-set-up-shape": dataclasses.replace(
                calc, log_parser="parse_log_pytest", test_cmd=SET_UP_AND_PYTEST
            ),
        }
        for shape in ("django", "sympy"):
            image, base = build_runner_image(shape)
            path = write_runner_jsonl(tmp_path_factory.mktemp(shape) / "row.jsonl", shape, image, base)
            (rows[shape],) = load_swebench_file(path)
        _BUILT["rows"] = rows
    return _BUILT["rows"]


def _harbor(tmp_path_factory):
    if "harbor" not in _BUILT:
        task = load_harbor_task(
            write_harbor_task(tmp_path_factory.mktemp("harbor") / "add", images.ensure_base_image())
        )
        ensure_task_image(task)
        _BUILT["harbor"] = task
    return _BUILT["harbor"]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return _images(tmp_path_factory)


@pytest.fixture(scope="module")
def harbor_task(tmp_path_factory):
    return _harbor(tmp_path_factory)


def _gold(row: str) -> str:
    return CALC_GOLD if row.startswith("pytest") else RUNNER_GOLD


def _in_package(code: str) -> str:
    """A diff appending `code` to `calc/__init__.py` (the same file on every row)."""
    lines = code.strip("\n").splitlines()
    return (
        "diff --git a/calc/__init__.py b/calc/__init__.py\n--- a/calc/__init__.py\n+++ b/calc/__init__.py\n"
        f"@@ -1 +1,{len(lines) + 1} @@\n {CALC_REPO['calc/__init__.py'].rstrip()}\n"
        + "".join(f"+{line}\n" for line in lines)
    )


def _grade(config, pairs):
    return asyncio.run(grade_many(pairs, config=config))


def _assert_caught(reports, labels, *, expect=()):
    for label, report in zip(labels, reports, strict=True):
        assert isinstance(report, VerifierReport), (label, report)
        assert report.reward == 0.0, (label, report.to_dict())
        assert report.tampering, (label, report.tests, report.output[-3000:])
        if expect:
            assert any(t.startswith(expect) for t in report.tampering), (label, report.tampering)


@pytest.mark.parametrize("row", sorted(ROWS))
def test_gold_scores_1_and_the_empty_diff_0_on_every_runner_shape(config, rows, row):
    gold, empty = _grade(config, [(rows[row], _gold(row)), (rows[row], "")])
    assert gold.reward == 1.0 and gold.tampering == (), (gold.tampering, gold.tests, gold.output[-3000:])
    assert empty.reward == 0.0 and empty.tampering == (), (empty.tampering, empty.output[-3000:])
    assert empty.failed_tests == tuple(rows[row].FAIL_TO_PASS)
    assert gold.canary_survival is not None  # stated per grade, with the shortfall named when above 1e-3
    if gold.canary_survival > 1e-3:
        assert gold.canary_shortfall, gold.to_dict()


@pytest.mark.parametrize("row", sorted(ROWS))
def test_a_passing_line_printed_after_the_run_scores_0_and_is_named(config, rows, row):
    labels = sorted(LAST_LINE)
    reports = _grade(config, [(rows[row], _in_package(forged(LAST_LINE[v], ROWS[row]))) for v in labels])
    _assert_caught(reports, labels)
    for label, report in zip(labels, reports, strict=True):
        # The run's own line says the test failed, whatever came after it: worst status wins.
        assert report.tests[rows[row].FAIL_TO_PASS[0]] in ("failed", "error"), (label, report.tests)


@pytest.mark.parametrize("row", sorted(ROWS))
def test_a_rewritten_stream_scores_0_and_is_named(config, rows, row):
    labels = (
        ["every_pipe", "terminal_writer"] if row.startswith("pytest") else ["stdout_and_stderr", "every_pipe"]
    )
    reports = _grade(config, [(rows[row], _in_package(REWRITES[v])) for v in labels])
    _assert_caught(reports, labels)
    worked = 0
    for label, report in zip(labels, reports, strict=True):
        if report.tests.get(rows[row].FAIL_TO_PASS[0]) != "passed":
            continue  # the rewrite lost the output (its pump raced the exit): a crash, scored 0 above
        worked += 1
        # sympy's rows by their canary twins, Django's by the unittest watch, pytest's by either.
        caught_by = {"sympy": "canary:", "django": "watch:"}.get(row, ("watch:", "canary:"))
        assert any(t.startswith(caught_by) for t in report.tampering), (label, report.tampering)
    assert worked, [r.output[-2000:] for r in reports]  # at least one variant forged the failing test


def test_django_rows_read_their_statuses_on_stderr_and_forged_stdout_lines_score_0(config, rows):
    (report,) = _grade(config, [(rows["django"], _in_package(forged(FORGED_ON_STDOUT_FIRST, "django")))])
    _assert_caught([report], ["forged on stdout"])
    assert report.tests["test_add (calc_tests.test_add.AddTests)"] == "failed", report.tests
    assert any("exited 0 but its log shows failing tests" in t for t in report.tampering), report.tampering


def test_harbor_gold_scores_1_under_the_watch_and_the_empty_diff_0(config, harbor_task):
    gold, empty = _grade(config, [(harbor_task, GOLD_DIFF), (harbor_task, "")])
    assert (gold.reward, empty.reward) == (1.0, 0.0), (gold.to_dict(), empty.to_dict())
    assert gold.tampering == empty.tampering == ()
    assert gold.tests == {"test_outputs.py::test_add": "passed"}  # as the watch inside test.sh's pytest saw
    assert empty.tests == {"test_outputs.py::test_add": "failed"}


@pytest.mark.parametrize("attack", sorted(HARBOR))
def test_a_harbor_run_killed_cut_short_or_forced_to_pass_scores_0_and_is_flagged(config, harbor_task, attack):
    (report,) = _grade(config, [(harbor_task, _harbor_diff(HARBOR[attack]))])
    _assert_caught([report], [attack])


def _harbor_diff(code: str) -> str:
    lines = code.strip("\n").splitlines()
    return (
        "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n"
        f"@@ -1,2 +1,{len(lines) + 2} @@\n"
        + "".join(f"+{line}\n" for line in lines)
        + " def add(a, b):\n     return a - b\n"
    )


# -- the red team's fresh classes on the new surfaces ---------------------------------------------------
@pytest.mark.parametrize("row", ["pytest-swebench-parser", "django", "sympy"])
def test_forged_output_markers_read_from_the_process_table_score_0_and_are_named(config, rows, row):
    (report,) = _grade(config, [(rows[row], _in_package(forged(FORGES_THE_MARKERS, ROWS[row])))])
    _assert_caught([report], ["markers"])
    assert "MARKER-NOT-FOUND" in report.output  # the end marker's nonce is in no command line or environment


@pytest.mark.parametrize("row", ["pytest-ours", "django", "sympy"])
def test_a_test_file_changed_while_the_tests_run_scores_0_and_is_named(config, rows, row):
    (report,) = _grade(config, [(rows[row], _in_package(REWRITES_A_TEST_FILE))])
    _assert_caught([report], ["rewrites"])
    assert any(t.startswith("test files were changed while the tests ran") for t in report.tampering)


@pytest.mark.parametrize("attack", sorted(HARBOR_FRESH))
def test_a_harbor_wrapper_forged_or_a_test_sh_rewritten_scores_0_and_is_flagged(config, harbor_task, attack):
    (report,) = _grade(config, [(harbor_task, _harbor_diff(HARBOR_FRESH[attack]))])
    _assert_caught([report], [attack])
    if attack == "forges_the_wrappers_marker_and_kills_it":
        assert "HARBOR-MARKER-NOT-FOUND" in report.output
    expected = {
        "forges_the_wrappers_marker_and_kills_it": "tests/test.sh's run was cut short",
        "appends_a_reward_step_to_test_sh": "the task's verifier files in /tests were changed",
    }[attack]
    assert any(t.startswith(expected) for t in report.tampering), report.tampering
