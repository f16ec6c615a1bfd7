"""The verifier on real built-in tasks in Docker: gold → 1 and empty → 0 for every task in the suite, every
reward hack gets 0 and is reported, and infrastructure failures raise instead of scoring 0."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import re

import pytest
from suite_diffs import (
    FORCE_PASS_HOOK,
    PATCH_PYTEST_REPORTS,
    REWRITE_JUNIT_AT_EXIT,
    append,
    make_diff,
    package_init,
)

from legorl_jax.config import VerifierConfig
from legorl_jax.sandbox import resolve_backend
from legorl_jax.tasks.builtin import SUITE_DIR, load_builtin_suite, load_builtin_task
from legorl_jax.tasks.protection import hidden_test_paths
from legorl_jax.tasks.pytest_report import parse_summary
from legorl_jax.tasks.report import VerifierError
from legorl_jax.tasks.task_image import ensure_task_image
from legorl_jax.tasks.verifier import grade, grade_many

pytestmark = pytest.mark.docker

SUITE_TASKS = sorted(d.name for d in SUITE_DIR.iterdir() if d.is_dir() and not d.name.startswith("."))
SAMPLE = (
    "csvlet-embedded-quote-roundtrip" if "csvlet-embedded-quote-roundtrip" in SUITE_TASKS else SUITE_TASKS[0]
)
CONFIG = VerifierConfig(concurrency=6)


@pytest.fixture(scope="session")
def suite_tasks():
    """Every task in suite/, its image built (two builds at a time: the host has two cores)."""
    tasks = load_builtin_suite()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(ensure_task_image, tasks))
    return {t.instance_id: t for t in tasks}


@pytest.fixture(scope="session")
def gold_and_empty(suite_tasks):
    """One concurrent batch: the gold patch and the empty diff of every task."""
    pairs = [(t, t.patch) for t in suite_tasks.values()] + [(t, "") for t in suite_tasks.values()]
    results = asyncio.run(grade_many(pairs, config=CONFIG))
    return {
        (task.instance_id, "gold" if diff else "empty"): r
        for (task, diff), r in zip(pairs, results, strict=True)
    }


@pytest.mark.parametrize("task_id", SUITE_TASKS)
def test_the_gold_patch_gets_reward_1(gold_and_empty, suite_tasks, task_id):
    report = gold_and_empty[(task_id, "gold")]
    assert not isinstance(report, VerifierError), report
    assert report.reward == 1.0, (report.failed_tests, report.tampering, report.output[-3000:])
    assert report.apply.status == "applied" and report.removed_changes == () and report.tampering == ()
    assert report.tests == {t: "passed" for t in suite_tasks[task_id].tests}


@pytest.mark.parametrize("task_id", SUITE_TASKS)
def test_an_empty_diff_gets_reward_0_with_the_fail_to_pass_tests_failing(
    gold_and_empty, suite_tasks, task_id
):
    report = gold_and_empty[(task_id, "empty")]
    assert not isinstance(report, VerifierError), report
    task = suite_tasks[task_id]
    assert report.reward == 0.0 and report.apply.status == "empty" and report.tampering == ()
    assert set(report.failed_tests) == set(task.FAIL_TO_PASS), report.tests
    assert all(report.tests[t] == "passed" for t in task.PASS_TO_PASS)


def test_the_report_is_json_serialisable_with_durations(gold_and_empty):
    data = json.loads(json.dumps(gold_and_empty[(SAMPLE, "gold")].to_dict()))
    assert data["reward"] == 1.0 and data["apply"]["method"] == "git apply"
    assert {"start", "apply", "hidden_tests", "tests", "total"} <= set(data["durations"])
    assert "passed" in data["output"]


# ---------------------------------------------------------------------------------------------------
# Reward hacks, as real diffs against a real built-in task; graded in one concurrent batch.
# ---------------------------------------------------------------------------------------------------


def _hacks(task):
    hidden = sorted(hidden_test_paths(task.test_patch))[0]
    init = package_init(task)
    existing_test = sorted(p for p in task.PASS_TO_PASS if not p.startswith(hidden))[0].split("::")[0]
    plugin = lambda repo: (repo / "hackplugin.py").write_text(FORCE_PASS_HOOK)  # noqa: E731
    f2p_names = sorted({t.split("::")[-1].split("[")[0] for t in task.FAIL_TO_PASS if t.startswith(hidden)})
    passing_hidden = "".join(f"def {name}():\n    pass\n\n\n" for name in f2p_names)
    return {
        "edits_hidden_test": (lambda r: append(r / hidden, passing_hidden), False),
        "deletes_hidden_test": (None, False),
        "deletes_a_repo_test_next_to_the_fix": (lambda r: (r / existing_test).unlink(), True),
        "conftest_forces_passes": (lambda r: (r / "conftest.py").write_text(FORCE_PASS_HOOK), False),
        "tests_conftest_forces_passes": (
            lambda r: append(r / "tests" / "conftest.py", FORCE_PASS_HOOK),
            False,
        ),
        "pytest_ini_loads_a_plugin": (
            lambda r: (plugin(r), (r / "pytest.ini").write_text("[pytest]\naddopts = -p hackplugin\n")),
            False,
        ),
        "setup_cfg_loads_a_plugin": (
            lambda r: (plugin(r), (r / "setup.cfg").write_text("[tool:pytest]\naddopts = -p hackplugin\n")),
            False,
        ),
        "pyproject_loads_a_plugin": (
            lambda r: (
                plugin(r),
                append(r / "pyproject.toml", '\n[tool.pytest.ini_options]\naddopts = "-p hackplugin"\n'),
            ),
            False,
        ),
        "startup_hooks": (
            lambda r: (
                plugin(r),
                (r / "sitecustomize.py").write_text(
                    "import os\nos.environ['PYTEST_PLUGINS'] = 'hackplugin'\n"
                ),
                (r / "hack.pth").write_text("import hackplugin\n"),
            ),
            False,
        ),
        "atexit_rewrites_the_junit_report": (
            lambda r: append(r / init, REWRITE_JUNIT_AT_EXIT.replace("FORCE_EXIT", "pass")),
            False,
        ),
        "atexit_rewrites_the_report_and_forces_exit_0": (
            lambda r: append(r / init, REWRITE_JUNIT_AT_EXIT.replace("FORCE_EXIT", "_os._exit(0)")),
            False,
        ),
        "forked_writer_rewrites_the_report_later": (
            lambda r: append(
                r / init,
                REWRITE_JUNIT_AT_EXIT.replace(
                    "_atexit.register(_forge_junit)",
                    "_atexit.register(lambda: _os.fork() == 0 and (__import__('time').sleep(1.0), "
                    "_forge_junit(), _os._exit(0)))",
                ).replace("FORCE_EXIT", "pass"),
            ),
            False,
        ),
        "daemon_rewrites_the_report_after_pytest_exits": (
            lambda r: append(
                r / init,
                REWRITE_JUNIT_AT_EXIT.replace("_atexit.register(_forge_junit)", DAEMONISE).replace(
                    "FORCE_EXIT", "pass"
                ),
            ),
            False,
        ),
        "shadows_pytest_itself": (lambda r: (r / "pytest.py").write_text("import sys\nsys.exit(0)\n"), False),
        "package_code_patches_pytest_reports": (lambda r: append(r / init, PATCH_PYTEST_REPORTS), False),
        "atexit_deletes_the_report_to_look_like_a_crash": (
            lambda r: append(r / init, DELETE_JUNIT_AT_EXIT),
            False,
        ),
        "escapes_the_repository": (None, False),
    }


# Removes pytest's report after the session, so a failing run would look like broken infrastructure (dropped
# from the batch rather than scored 0).
DELETE_JUNIT_AT_EXIT = """
import atexit as _atexit
import os as _os
import sys as _sys


def _delete_junit():
    for _arg in _sys.argv:
        if _arg.startswith("--junitxml="):
            _os.unlink(_arg.split("=", 1)[1])
    _os._exit(1)


_atexit.register(_delete_junit)
"""


# Detaches a writer from pytest's session and output pipes, so pytest and the exec end before it writes.
DAEMONISE = """
def _daemon():
    if _os.fork() == 0:
        _os.setsid()
        if _os.fork() == 0:
            _devnull = _os.open(_os.devnull, _os.O_RDWR)
            for _fd in (0, 1, 2):
                _os.dup2(_devnull, _fd)
            __import__("time").sleep(10.0)
            _forge_junit()
        _os._exit(0)


_atexit.register(_daemon)
"""


def _hack_diff(task, name, edit, with_gold):
    hidden = sorted(hidden_test_paths(task.test_patch))[0]
    if name == "deletes_hidden_test":
        body = "".join(f"-{line}\n" for line in "x\ny".split("\n"))
        return (
            f"diff --git a/{hidden} b/{hidden}\ndeleted file mode 100644\n--- a/{hidden}\n+++ /dev/null\n"
            f"@@ -1,2 +0,0 @@\n{body}"
        )
    if name == "escapes_the_repository":
        return (
            "diff --git a/../../tmp/evil.py b/../../tmp/evil.py\nnew file mode 100644\n--- /dev/null\n"
            "+++ b/../../tmp/evil.py\n@@ -0,0 +1 @@\n+x = 1\n"
        )
    return make_diff(task, edit, with_gold=with_gold)


@pytest.fixture(scope="module")
def hack_reports(suite_tasks):
    task = suite_tasks[SAMPLE]
    hacks = _hacks(task)
    diffs = {name: _hack_diff(task, name, edit, gold) for name, (edit, gold) in hacks.items()}
    results = asyncio.run(grade_many([(task, d) for d in diffs.values()], config=CONFIG))
    return dict(zip(diffs, results, strict=True))


def _removed(report):
    return {c.path: c.reason for c in report.removed_changes}


@pytest.mark.parametrize(
    ("hack", "dropped"),
    [
        ("edits_hidden_test", "hidden test"),
        ("deletes_hidden_test", "hidden test"),
        ("conftest_forces_passes", "test file"),
        ("tests_conftest_forces_passes", "test file"),
        ("pytest_ini_loads_a_plugin", "test configuration"),
        ("setup_cfg_loads_a_plugin", "test configuration"),
        ("pyproject_loads_a_plugin", "test configuration"),
        ("startup_hooks", "interpreter start-up hook"),
        ("shadows_pytest_itself", "shadows the test runner"),
        ("escapes_the_repository", "path outside the repository"),
    ],
)
def test_a_protected_change_is_dropped_reported_and_earns_nothing(hack_reports, hack, dropped):
    report = hack_reports[hack]
    assert not isinstance(report, VerifierError), report
    assert report.reward == 0.0
    assert dropped in _removed(report).values(), _removed(report)


def test_dropping_a_protected_change_keeps_the_real_fix_next_to_it(hack_reports):
    report = hack_reports["deletes_a_repo_test_next_to_the_fix"]
    assert report.reward == 1.0 and list(_removed(report).values()) == ["test file"]


@pytest.mark.parametrize(
    "hack",
    [
        "atexit_rewrites_the_junit_report",
        "atexit_rewrites_the_report_and_forces_exit_0",
        "forked_writer_rewrites_the_report_later",
        "daemon_rewrites_the_report_after_pytest_exits",
    ],
)
def test_a_rewritten_junit_report_earns_nothing_and_is_reported(hack_reports, suite_tasks, hack):
    report = hack_reports[hack]
    assert not isinstance(report, VerifierError), report
    assert report.reward == 0.0 and report.removed_changes == ()
    assert report.tampering or report.leftover_processes, report.to_dict()
    if hack == "daemon_rewrites_the_report_after_pytest_exits":  # normally killed before it writes
        assert any("python" in p for p in report.leftover_processes) or report.tampering, report.to_dict()
    elif (
        hack == "forked_writer_rewrites_the_report_later"
        and resolve_backend() == "bwrap"
        and not report.tampering
    ):
        # bubblewrap's PID namespace ends with pytest, so the forked writer dies before it writes: the honest
        # report stands, with the fix-to-pass tests failing.
        assert report.leftover_processes == () and set(report.failed_tests) == set(
            suite_tasks[SAMPLE].FAIL_TO_PASS
        )
    else:
        assert any("JUnit report says passed" in t or "exited 0" in t for t in report.tampering), (
            report.tampering
        )


def test_package_code_that_forges_every_pytest_report_consistently_is_caught_by_the_canary(hack_reports):
    report = hack_reports["package_code_patches_pytest_reports"]
    assert not isinstance(report, VerifierError), report
    assert report.reward == 0.0 and report.removed_changes == ()
    assert all(status == "passed" for status in report.tests.values())  # the forgery itself is consistent
    assert any("canary" in t and "reported passed" in t for t in report.tampering), report.tampering


def test_a_report_deleted_after_pytest_finished_is_tampering_not_an_infrastructure_failure(hack_reports):
    report = hack_reports["atexit_deletes_the_report_to_look_like_a_crash"]
    assert not isinstance(report, VerifierError), report
    assert report.reward == 0.0 and report.tampering == (
        "pytest finished (exit 1) but its JUnit report is gone",
    )


def test_an_honest_run_reports_its_canary_twins_failing_and_nothing_else(gold_and_empty, suite_tasks):
    report = gold_and_empty[(SAMPLE, "gold")]
    assert report.reward == 1.0 and report.tampering == () and report.exit_code == 1
    counts = parse_summary(report.output)
    assert counts["failed"] >= 1 and counts["passed"] == len(suite_tasks[SAMPLE].tests), counts
    assert "canary" not in report.output


def test_a_task_command_that_stops_at_the_first_failure_still_runs_every_test(suite_tasks):
    # With -x honoured, the always-failing canary would end the run before the hidden tests whenever it is
    # drawn first, and the gold patch would score 0 (or the run would look like tampering) by chance.
    task = dataclasses.replace(suite_tasks[SAMPLE], test_cmd=suite_tasks[SAMPLE].test_cmd + " -x")
    for _ in range(3):  # the canary's place in the order is random; three draws make a miss unlikely to hide
        report = asyncio.run(grade(task, task.patch, config=CONFIG))
        assert report.reward == 1.0 and report.tampering == (), report.to_dict()
        assert report.tests == {t: "passed" for t in task.tests}


def test_a_diff_that_does_not_apply_is_a_policy_failure_with_reward_0(suite_tasks):
    task = suite_tasks[SAMPLE]
    path = package_init(task)
    diff = (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"
        "@@ -1,2 +1,2 @@\n-no such line\n-nor this\n+x\n+y\n"
    )
    report = asyncio.run(grade(task, diff, config=CONFIG))
    assert report.reward == 0.0 and report.apply.status == "failed" and report.exit_code is None
    assert "patch --fuzz=5" in report.apply.log


def _drift_first_context_line(patch: str) -> str:
    lines, drifted, in_hunk = [], False, False
    for line in patch.splitlines(keepends=True):
        if line.startswith("index "):
            continue  # without blob ids git cannot fall back to a 3-way merge
        in_hunk = in_hunk or line.startswith("@@")
        if in_hunk and not drifted and line.startswith(" ") and line.strip():
            line, drifted = line.rstrip("\n") + "  # drifted since the diff was taken\n", True
        lines.append(line)
    assert drifted
    return "".join(lines)


def test_a_diff_with_drifted_context_still_applies_through_the_patch_fallback(suite_tasks):
    task = suite_tasks[SAMPLE]
    report = asyncio.run(grade(task, _drift_first_context_line(task.patch), config=CONFIG))
    assert report.apply.status == "applied" and report.apply.method == "patch --fuzz=5", report.apply.log
    assert report.reward == 1.0


def test_an_unreadable_diff_is_reported_as_malformed(suite_tasks):
    report = asyncio.run(grade(suite_tasks[SAMPLE], "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,3 +1 @@\n"))
    assert report.reward == 0.0 and report.apply.status == "malformed"


# ---------------------------------------------------------------------------------------------------
# Infrastructure failures raise VerifierError; they are never a reward of 0.
# ---------------------------------------------------------------------------------------------------


def test_a_missing_image_raises_verifier_error(suite_tasks):
    task = dataclasses.replace(suite_tasks[SAMPLE], image="legorl-task-does-not-exist:0")
    with pytest.raises(VerifierError, match="grading sandbox failed"):
        asyncio.run(grade(task, task.patch))


def test_a_test_run_that_leaves_no_report_raises_verifier_error(suite_tasks):
    task = dataclasses.replace(suite_tasks[SAMPLE], test_cmd="python3 -m no_such_test_runner")
    with pytest.raises(VerifierError, match="left no JUnit report") as caught:
        asyncio.run(grade(task, ""))
    assert caught.value.reason == "no_result"


def test_hidden_tests_that_do_not_apply_raise_verifier_error(suite_tasks):
    task = suite_tasks[SAMPLE]
    # A well-formed diff that cannot apply: it creates, as a new file, a file the repository already has.
    existing = re.search(r"^diff --git a/(\S+) ", task.patch, re.MULTILINE).group(1)
    broken = (
        f"diff --git a/{existing} b/{existing}\nnew file mode 100644\n--- /dev/null\n+++ b/{existing}\n"
        "@@ -0,0 +1 @@\n+x = 1\n"
    )
    with pytest.raises(VerifierError, match=rf"task '{SAMPLE}': the hidden tests do not apply") as caught:
        asyncio.run(grade(dataclasses.replace(task, test_patch=broken), ""))
    assert caught.value.reason == "hidden_tests"


def test_a_reloaded_task_has_the_same_image_and_base(suite_tasks):
    again = load_builtin_task(SUITE_DIR / SAMPLE)
    assert (again.image, again.base_commit) == (suite_tasks[SAMPLE].image, suite_tasks[SAMPLE].base_commit)
