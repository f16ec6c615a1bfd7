"""Canaries planted in real built-in tasks' hidden test files, run by the host's pytest on the task's repo
with the gold patch: the must-fail copy fails, the must-pass copy passes, and neither looks like a generated
test."""

from __future__ import annotations

import ast
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
from scratch_git import git

from legorl_jax.tasks.builtin import SUITE_DIR, load_builtin_suite, load_builtin_task
from legorl_jax.tasks.canary import Canary, CanaryError, canary_problems, hidden_test_sources, plan_canaries
from legorl_jax.tasks.snapshot import write_snapshot_repo

SUITE_TASKS = sorted(d.name for d in SUITE_DIR.iterdir() if d.is_dir())
# A parametrized first test, a decorated-test file, string-only expected values, constructor-built ones.
FAST = [
    "autocomplete-casefold-prefix",
    "calcpy-unary-minus-power",
    "money-allocate-negative-amounts",
    "geometry-collinear-overlap",
]


def _run_canaries(task_id: str, tmp_path: Path) -> tuple[dict[str, str], object, str]:
    task = load_builtin_task(SUITE_DIR / task_id)
    repo = tmp_path / "repo"
    write_snapshot_repo(Path(task.image_context), repo)
    git(repo, "apply", "-", stdin=task.patch)
    git(repo, "apply", "-", stdin=task.test_patch)
    plan = plan_canaries(task)
    (repo / plan.path).write_text(plan.source)
    ids = [*task.tests, *(c.node_id for c in plan.canaries)]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *ids],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )
    statuses = {}
    for line in run.stdout.splitlines():
        m = re.match(r"^(PASSED|FAILED|ERROR) (\S+)", line)
        if m:
            statuses[m.group(2)] = m.group(1)
    return statuses, plan, run.stdout


def _check(task_id, tmp_path):
    statuses, plan, out = _run_canaries(task_id, tmp_path)
    must_fail, must_pass = plan.canaries
    assert statuses[must_fail.node_id] == "FAILED", out[-3000:]
    assert statuses[must_pass.node_id] == "PASSED", out[-3000:]
    assert sum(s == "FAILED" for s in statuses.values()) == 1, out[-3000:]  # every real test passes with gold
    names = [c.node_id.split("::")[1] for c in plan.canaries]
    assert not any(re.fullmatch(r"test_[0-9a-f]{10}", n) for n in names)
    defined = {n.name for n in ast.parse(plan.source).body if isinstance(n, ast.FunctionDef)}
    assert set(names) <= defined  # inside a hidden test file, beside the real tests


@pytest.mark.parametrize("task_id", FAST)
def test_the_must_fail_canary_fails_and_the_must_pass_one_passes_with_the_gold_patch(task_id, tmp_path):
    _check(task_id, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("task_id", SUITE_TASKS)
def test_every_suite_task_gets_working_canaries(task_id, tmp_path):
    _check(task_id, tmp_path)


def test_the_must_fail_canary_is_a_copy_of_a_hidden_test_with_one_expected_value_changed():
    task = load_builtin_task(SUITE_DIR / FAST[0])
    plan = plan_canaries(task)
    original_source = hidden_test_sources(task.test_patch)[plan.path]
    must_fail = plan.canaries[0]
    bodies = {n.name: n for n in ast.parse(plan.source).body if isinstance(n, ast.FunctionDef)}
    copy, original = bodies[must_fail.node_id.split("::")[1]], bodies[must_fail.original.split("::")[1]]
    assert len(copy.body) == len(original.body)
    differing = [(a, b) for a, b in zip(copy.body, original.body, strict=True) if ast.dump(a) != ast.dump(b)]
    assert len(differing) == 1 and isinstance(differing[0][0], ast.Assert)  # only the expected value changed
    assert all(
        line in plan.source.splitlines() for line in original_source.splitlines()
    )  # nothing else moved


def test_two_plans_for_one_task_differ():
    task = load_builtin_task(SUITE_DIR / FAST[0])
    plans = {plan_canaries(task).source for _ in range(5)}
    assert len(plans) > 1


def test_a_task_whose_hidden_tests_offer_no_candidate_is_an_error_naming_it():
    task = load_builtin_suite()[0]
    bare = (
        "diff --git a/tests/test_new.py b/tests/test_new.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/tests/test_new.py\n@@ -0,0 +1,2 @@\n+def test_truth():\n+    assert True\n"
    )
    task = dataclasses.replace(
        task, test_patch=bare, FAIL_TO_PASS=["tests/test_new.py::test_truth"], PASS_TO_PASS=[]
    )
    with pytest.raises(CanaryError, match=task.instance_id):
        plan_canaries(task)


_FAIL = Canary("t.py::test_copy_a", "must_fail", "t.py::test_a")
_PASS = Canary("t.py::test_copy_b", "must_pass", "t.py::test_b")


def test_a_must_fail_canary_reported_passed_while_its_original_passed_is_a_problem():
    seen = {
        "t.py::test_copy_a": "passed",
        "t.py::test_a": "passed",
        "t.py::test_copy_b": "passed",
        "t.py::test_b": "passed",
    }
    problems = canary_problems((_FAIL, _PASS), seen)
    assert len(problems) == 1 and "must_fail" in problems[0] and "reported passed" in problems[0]


def test_a_must_fail_canary_whose_original_failed_is_not_judged():
    # Code without the fix may return exactly the changed value (a wrong distance of 7 where 5 is right, and
    # the copy expects 7): the copy then passes on an honest run.
    for got in ("passed", "failed"):
        seen = {
            "t.py::test_copy_a": got,
            "t.py::test_a": "failed",
            "t.py::test_copy_b": "passed",
            "t.py::test_b": "passed",
        }
        assert canary_problems((_FAIL, _PASS), seen) == []


def test_a_must_pass_canary_that_differs_from_its_original_is_a_problem_either_way():
    for got, original in (("passed", "failed"), ("failed", "passed")):
        seen = {
            "t.py::test_copy_a": "failed",
            "t.py::test_a": "passed",
            "t.py::test_copy_b": got,
            "t.py::test_b": original,
        }
        problems = canary_problems((_FAIL, _PASS), seen)
        assert len(problems) == 1 and f"must_pass) was reported {got}, not {original}" in problems[0]
