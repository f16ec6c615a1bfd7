"""Canary twins planted in real built-in tasks' hidden test files, run by the host's pytest on the task's repo
with the gold patch: every twin fails, every listed test passes under its run name; and, in pure Python, a
forger who reads the planted file and guesses survives as often as the plan says, whatever it looks at."""

from __future__ import annotations

import ast
import collections
import dataclasses
import math
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from scratch_git import git

from legorl_jax.tasks.builtin import SUITE_DIR, load_builtin_suite, load_builtin_task
from legorl_jax.tasks.canary import Canary, CanaryError, CanaryPlan, canary_problems, plan_canaries
from legorl_jax.tasks.snapshot import write_snapshot_repo

SUITE_TASKS = sorted(d.name for d in SUITE_DIR.iterdir() if d.is_dir())


# semverkit and unionfind as first written: before they gained eligible fix tests, their fix tests could not
# reach 1e-3, which is what the shortfall report is for (a SWE-bench row can be like that).
FIRST_FIX_TESTS = {
    "semverkit-prerelease-range-match": (
        "test_alternative_without",
        "test_max_satisfying_ignores",
        "test_prereleases_do_not",
    ),
    "unionfind-offsets-after-compression": (
        "test_consistent_measurement",
        "test_differences_are",
        "test_positions_relative",
    ),
}


def as_first_written(task_id: str):
    task = load_builtin_task(SUITE_DIR / task_id)
    first = [t for t in task.FAIL_TO_PASS if t.split("::")[1].startswith(FIRST_FIX_TESTS[task_id])]
    assert 0 < len(first) < len(task.FAIL_TO_PASS), task.FAIL_TO_PASS
    return dataclasses.replace(task, FAIL_TO_PASS=first)


# A parametrized first test, a decorated-test file, string-only expected values, constructor-built ones.
FAST = [
    "autocomplete-casefold-prefix",
    "calcpy-unary-minus-power",
    "money-allocate-negative-amounts",
    "geometry-collinear-overlap",
]
_CONSTANT_RE = re.compile(r"[0-9]+(?:\.[0-9]+)?|'[^']*'|\"[^\"]*\"")


def _run_canaries(task_id: str, tmp_path: Path) -> tuple[dict[str, str], CanaryPlan, str]:
    task = load_builtin_task(SUITE_DIR / task_id)
    repo = tmp_path / "repo"
    write_snapshot_repo(Path(task.image_context), repo)
    git(repo, "apply", "-", stdin=task.patch)
    git(repo, "apply", "-", stdin=task.test_patch)
    plan = plan_canaries(task)
    for path, source in plan.files.items():
        (repo / path).write_text(source)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *plan.run_ids(task.tests)],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )
    statuses = {}
    for line in run.stdout.splitlines():
        m = re.match(r"^(PASSED|FAILED|ERROR) (\S+)", line)
        if m:
            statuses[m.group(2)] = m.group(1).lower()
    return statuses, plan, run.stdout


def _check(task_id, tmp_path):
    statuses, plan, out = _run_canaries(task_id, tmp_path)
    task = load_builtin_task(SUITE_DIR / task_id)
    assert all(statuses.get(c.node_id) == "failed" for c in plan.canaries), out[-3000:]
    assert plan.listed_statuses(statuses, task.tests) == {t: "passed" for t in task.tests}, out[-3000:]
    assert canary_problems(plan, statuses) == []
    names = [i.split("::")[1] for i in [*plan.renamed.values(), *(c.node_id for c in plan.canaries)]]
    assert not any(re.fullmatch(r"test_[0-9a-f]{10}", n) for n in names)
    for path, source in plan.files.items():
        defined = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
        assert {
            n for i, n in zip([*plan.renamed.values()], names, strict=False) if i.startswith(path)
        } <= defined


@pytest.mark.parametrize("task_id", FAST)
def test_every_twin_fails_and_every_renamed_test_passes_with_the_gold_patch(task_id, tmp_path):
    _check(task_id, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("task_id", SUITE_TASKS)
def test_every_suite_task_gets_working_canaries(task_id, tmp_path):
    _check(task_id, tmp_path)


def _groups(plan: CanaryPlan) -> list[list[tuple[str, str]]]:
    """What a forger reading the planted files sees: functions that are the same text once constants are
    masked, as (node id, source) per member."""
    found: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
    for path, source in plan.files.items():
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef):
                text = ast.get_source_segment(source, node).split("\n", 1)[1]
                found[path + _CONSTANT_RE.sub("K", text)].append((f"{path}::{node.name}", text))
    return [g for g in found.values() if len(g) > 1]


def test_every_group_holds_one_original_and_its_twins_and_nothing_else():
    task = load_builtin_task(SUITE_DIR / FAST[0])
    plan = plan_canaries(task)
    originals = {c.original for c in plan.canaries}
    groups = _groups(plan)
    assert len(groups) == len(originals)
    for group in groups:
        ids = {i for i, _ in group}
        owners = {c.original for c in plan.canaries if c.node_id in ids}
        assert len(owners) == 1 and plan.renamed[owners.pop()] in ids
        assert len({text for _, text in group}) == len(group)  # every twin differs from the others


def test_a_guessing_forger_survives_as_often_as_the_plan_says():
    task = load_builtin_task(SUITE_DIR / "money-allocate-negative-amounts")
    rng = random.Random(31)
    plan = plan_canaries(task, max_twins=8, rng=rng)
    failing = {plan.renamed[t] for t in task.FAIL_TO_PASS if t in plan.renamed}
    groups = [g for g in _groups(plan) if failing & {i for i, _ in g}]
    assert plan.survival == pytest.approx(math.prod(1 / len(g) for g in groups))
    draws = 4000
    survived = sum(all(rng.choice(g)[0] in failing for g in groups) for _ in range(draws))
    # Binomial: the count lies within 4 standard deviations of draws * survival (a miss means the plan's
    # number and the file disagree, e.g. a group the plan counts but a forger would not see).
    spread = 4 * math.sqrt(draws * plan.survival * (1 - plan.survival))
    assert abs(survived - draws * plan.survival) <= spread, (survived, draws * plan.survival)


def test_the_default_plan_reaches_one_in_a_thousand_for_tasks_with_two_or_more_eligible_fix_tests():
    task = load_builtin_task(SUITE_DIR / "money-allocate-negative-amounts")
    assert plan_canaries(task).survival <= 1e-3


def test_neither_the_value_the_place_nor_the_name_singles_out_the_original():
    # A forger's best rule from what it sees: the smallest (or largest) value of a group, its first (or
    # last) member in the file, or the name that sorts first. Each must pick the original only about as
    # often as a blind guess.
    task = load_builtin_task(SUITE_DIR / "money-allocate-negative-amounts")
    rng = random.Random(7)
    hits = collections.Counter()
    chance = 0.0
    rounds = 300
    for _ in range(rounds):
        plan = plan_canaries(task, max_twins=4, rng=rng)
        originals = set(plan.renamed.values())
        group = _groups(plan)[0]
        chance += 1 / len(group)
        values = [(_CONSTANT_RE.findall(text), i) for i, text in group]
        hits["smallest value"] += min(values)[1] in originals
        hits["largest value"] += max(values)[1] in originals
        hits["first in file"] += group[0][0] in originals
        hits["last in file"] += group[-1][0] in originals
        hits["first name"] += min(i for i, _ in group) in originals
    for rule, count in hits.items():
        assert abs(count - chance) <= 4 * math.sqrt(chance), (rule, count, chance)


def test_two_plans_for_one_task_differ():
    task = load_builtin_task(SUITE_DIR / FAST[0])
    plans = {tuple(plan_canaries(task).files.values()) for _ in range(5)}
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


_PLAN = CanaryPlan({}, (Canary("t.py::test_b_a", "t.py::test_a"),), {"t.py::test_a": "t.py::test_a_b"}, 0.5)


def test_a_twin_reported_passed_while_its_original_passed_is_a_problem():
    problems = canary_problems(_PLAN, {"t.py::test_b_a": "passed", "t.py::test_a_b": "passed"})
    assert len(problems) == 1 and "must-fail twin of t.py::test_a" in problems[0]
    assert "reported passed" in problems[0]


def test_a_twin_whose_original_failed_is_not_judged():
    # Code without the fix may return exactly a twin's value (a wrong distance of 7 where 5 is right, and
    # the twin expects 7): the twin then passes on an honest run.
    for got in ("passed", "failed"):
        assert canary_problems(_PLAN, {"t.py::test_b_a": got, "t.py::test_a_b": "failed"}) == []


def test_the_listed_statuses_come_back_under_the_listed_ids():
    seen = {"t.py::test_a_b": "passed", "t.py::test_b_a": "failed", "t.py::test_c": "failed"}
    assert _PLAN.listed_statuses(seen, ("t.py::test_a", "t.py::test_c")) == {
        "t.py::test_a": "passed",
        "t.py::test_c": "failed",
    }
    assert _PLAN.run_ids(("t.py::test_a", "t.py::test_c")) == [
        "t.py::test_a_b",
        "t.py::test_c",
        "t.py::test_b_a",
    ]


def test_a_short_string_constant_varies_its_letters_once_its_digits_run_out():
    # flagparse expects 'image=web:2': its one digit has ten values, a group needs 32 and more.
    task = load_builtin_task(SUITE_DIR / "flagparse-equals-in-value")
    plan = plan_canaries(task, rng=random.Random(5))
    twin = "tests/test_issue_equals_value.py::test_value_containing_equals_after_inline_equals"
    per_original = collections.Counter(c.original for c in plan.canaries)
    assert per_original[twin] > 9, per_original
    assert plan.survival <= 1e-3 and plan.shortfall is None


def test_a_string_used_as_a_key_changes_only_its_digits_and_the_shortfall_is_reported():
    # unionfind's expected values read TRUE["s7"]: a twin reading TRUE["k3"] would name no key of the file's
    # dict, which tells it from the original; with ten values per group the target is out of reach.
    task = as_first_written("unionfind-offsets-after-compression")
    plan = plan_canaries(task, rng=random.Random(5))
    keys = {k for source in plan.files.values() for k in re.findall(r'TRUE\["([a-z]+)[0-9]"\]', source)}
    assert keys == {"s"}
    assert plan.survival == pytest.approx(1e-2) and "2 of the 3 FAIL_TO_PASS tests" in (plan.shortfall or "")


def test_a_group_whose_string_has_few_values_leaves_the_growing_to_the_others():
    # linediff: '--- a' has 26 values (one letter), so its group stops at 26 and the other group grows.
    task = load_builtin_task(SUITE_DIR / "linediff-zero-length-hunk-range")
    plan = plan_canaries(task, rng=random.Random(5))
    per_original = collections.Counter(c.original for c in plan.canaries)
    assert per_original["tests/test_issue_empty_ranges.py::test_diff_from_empty_file_starts_at_zero"] == 25
    assert plan.survival <= 1e-3 and plan.shortfall is None


def test_a_task_with_one_eligible_fix_test_says_why_it_misses_the_target():
    plan = plan_canaries(as_first_written("semverkit-prerelease-range-match"))
    assert plan.survival > 1e-3 and len(plan.canaries) == 64
    assert plan.shortfall is not None and "1 of the" in plan.shortfall and "64 twins" in plan.shortfall
    assert "cap of 64" in plan.shortfall and "1e-03 would take 999 twins" in plan.shortfall


def test_the_shortfall_names_every_fix_test_without_twins_and_what_rules_it_out():
    shortfall = plan_canaries(as_first_written("semverkit-prerelease-range-match")).shortfall or ""
    parametrized = "test_prereleases_do_not_match_ranges_without_a_prerelease_on_their_tuple (7 cases)"
    assert f"{parametrized}: it is decorated" in shortfall
    assert (
        "test_alternative_without_prerelease_does_not_admit_one: it asserts no `actual ==" in shortfall
    )  # not
    assert "test_max_satisfying_ignores_unrequested_prereleases" not in shortfall  # the one that has twins
    shortfall = plan_canaries(as_first_written("unionfind-offsets-after-compression")).shortfall
    assert shortfall is not None
    assert (
        "test_positions_relative_to_an_anchor has 10 members, every value its constant can take" in shortfall
    )
    assert "(a dict key: only its digits vary)" in shortfall
    assert (
        "test_differences_are_right_after_merging_groups_of_groups: its `==` asserts sit inside" in shortfall
    )


def test_an_expected_value_written_in_greek_gets_twins_in_greek_letters_of_the_same_case():
    # autocomplete expects ["ΟΔΟΣ ΣΤΑΔΙΟΥ"]: no ASCII letter or digit, so it had no twins and the other two
    # fix tests carried the whole 1e-3 (63 twins a grade instead of 29).
    task = load_builtin_task(SUITE_DIR / "autocomplete-casefold-prefix")
    plan = plan_canaries(task, rng=random.Random(3))
    greek = "tests/test_issue_unicode_case.py::test_greek_final_sigma_in_prefix_matches"
    twins = [c for c in plan.canaries if c.original == greek]
    assert len(twins) >= 9 and plan.survival <= 1e-3 and len(plan.canaries) < 40
    values = set(re.findall(r'== \["([^"]*)"\]', "".join(plan.files.values())))
    drawn = {v for v in values if len(v) == len("ΟΔΟΣ ΣΤΑΔΙΟΥ") and v != "ΟΔΟΣ ΣΤΑΔΙΟΥ" and v[4] == " "}
    assert len(drawn) == len(twins)  # each twin's changed first assert; the second ones are all unchanged
    assert all(ch in "ΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩ " for v in drawn for ch in v), drawn


def test_an_isclose_assert_at_the_default_tolerance_gets_twins_and_one_with_a_tolerance_does_not():
    # calcpy's gaussian test asserts math.isclose(got, <expression>): with its twins calcpy has two eligible
    # fix tests instead of one, and reaches 1e-3 within the 64 twins (32 x 32 members).
    plan = plan_canaries(load_builtin_task(SUITE_DIR / "calcpy-unary-minus-power"), rng=random.Random(2))
    gaussian = "tests/test_issue_unary_minus_power.py::test_gaussian_with_variable"
    assert sum(c.original == gaussian for c in plan.canaries) == 31
    assert plan.survival <= 1e-3 and plan.shortfall is None
    # With a tolerance of its own, a twin's value could fall inside it and pass: no twins.
    own_tolerance = (
        "diff --git a/tests/test_new.py b/tests/test_new.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/tests/test_new.py\n@@ -0,0 +1,4 @@\n+import math\n+\n+def test_near():\n"
        "+    assert math.isclose(math.sqrt(2), 1.41, rel_tol=0.1)\n"
    )
    task = dataclasses.replace(
        load_builtin_suite()[0],
        test_patch=own_tolerance,
        FAIL_TO_PASS=["tests/test_new.py::test_near"],
        PASS_TO_PASS=[],
    )
    with pytest.raises(CanaryError, match=task.instance_id):
        plan_canaries(task)


def test_every_suite_task_reaches_one_in_a_thousand():
    for seed in range(3):
        short = {
            task_id: plan.shortfall
            for task_id in SUITE_TASKS
            if (
                plan := plan_canaries(load_builtin_task(SUITE_DIR / task_id), rng=random.Random(seed))
            ).survival
            > 1e-3
        }
        assert short == {}, (seed, short)


def test_the_fix_tests_added_to_semverkit_and_unionfind_each_get_a_group_of_twins():
    for task_id in FIRST_FIX_TESTS:
        task = load_builtin_task(SUITE_DIR / task_id)
        added = [t for t in task.FAIL_TO_PASS if not t.split("::")[1].startswith(FIRST_FIX_TESTS[task_id])]
        plan = plan_canaries(task, rng=random.Random(1))
        per_original = collections.Counter(c.original for c in plan.canaries)
        assert len(added) == 3 and all(per_original[t] >= 3 for t in added), (task_id, per_original)
        assert plan.shortfall is None
