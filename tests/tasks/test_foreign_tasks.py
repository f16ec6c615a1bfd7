"""SWE-bench-style and Harbor tasks graded in Docker (and once on bubblewrap, from the Docker images):
gold → 1, empty → 0, hacks → 0, infra → VerifierError."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import shutil

import pytest
from harbor_fixture import GOLD_DIFF, TASK_TOML, write_harbor_task
from suite_diffs import PATCH_PYTEST_REPORTS, READS_THE_CANARIES, READS_THE_GRADER_FILES
from swebench_fixture import GOLD, REPO, build_swebench_image, write_jsonl

from legorl_jax.config import VerifierConfig
from legorl_jax.sandbox import images
from legorl_jax.sandbox.images import ImageError
from legorl_jax.tasks.agent_sandbox import oracle_diff
from legorl_jax.tasks.harbor import load_harbor_task
from legorl_jax.tasks.pytest_report import parse_summary
from legorl_jax.tasks.report import VerifierError
from legorl_jax.tasks.swebench import load_swebench_file
from legorl_jax.tasks.task_image import ensure_task_image
from legorl_jax.tasks.verifier import grade, grade_many, grading_identity

pytestmark = pytest.mark.docker

CONFTEST_HACK = (
    "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n"
    "@@ -0,0 +1,6 @@\n+import pytest\n+@pytest.hookimpl(hookwrapper=True)\n"
    "+def pytest_runtest_makereport(item, call):\n+    outcome = yield\n"
    "+    outcome.get_result().outcome = 'passed'\n+\n"
)
# calc.py, when imported by the Harbor verifier's tests, leaves a detached writer that keeps claiming success.
REWARD_DAEMON = (
    "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,13 @@\n+import os\n+import "
    "time\n+\n+if os.fork() == 0:\n+    os.setsid()\n+    if os.fork() == 0:\n+        for _ in "
    "range(600):\n+            os.makedirs('/logs/verifier', exist_ok=True)\n+            "
    "open('/logs/verifier/reward.txt', 'w').write('1')\n+            time.sleep(0.05)\n+    os._exit(0)\n "
    "def add(a, b):\n     return a - b\n"
)
# The same, but the detached process deletes the reward as soon as tests/test.sh has written it.
DELETER_SOURCE = """\
import os
import time

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for _ in range(30000):
            try:
                os.remove('/logs/verifier/reward.txt')
            except OSError:
                time.sleep(0.001)
    os._exit(0)
"""
REWARD_DELETER = (
    "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n"
    f"@@ -1,2 +1,{DELETER_SOURCE.count(chr(10)) + 2} @@\n"
    + "".join(f"+{line}\n" for line in DELETER_SOURCE.splitlines())
    + " def add(a, b):\n     return a - b\n"
)
# Graded on Docker, where a detached process can outlive tests/test.sh (on bubblewrap none outlives an exec).
ON_DOCKER = VerifierConfig(backend="docker")
OUTSIDE_REWARD = (
    "diff --git a/../logs/verifier/reward.txt b/../logs/verifier/reward.txt\nnew file mode 100644\n"
    "--- /dev/null\n+++ b/../logs/verifier/reward.txt\n@@ -0,0 +1 @@\n+1\n"
)


def _in_calc_package(code: str) -> str:
    """A diff appending `code` to the SWE-bench row's package `calc/__init__.py` (its tests import it)."""
    lines = code.splitlines()
    return (
        "diff --git a/calc/__init__.py b/calc/__init__.py\n--- a/calc/__init__.py\n+++ b/calc/__init__.py\n"
        f"@@ -1 +1,{len(lines) + 1} @@\n {REPO['calc/__init__.py'].rstrip()}\n"
        + "".join(f"+{line}\n" for line in lines)
    )


# The issue-31 forgeries that work on pytest's machinery from inside the package, on a SWE-bench row whose
# test command is `python -m pytest`: each makes the failing FAIL_TO_PASS test pass in pytest's own output.
SWEBENCH_FORGERIES = {
    "rewrites_the_reports": PATCH_PYTEST_REPORTS,
    "reads_the_canaries": READS_THE_CANARIES,
    "reads_the_grader_files": READS_THE_GRADER_FILES,
}


@pytest.fixture(scope="module")
def swebench_task(tmp_path_factory):
    image, base = build_swebench_image()
    (task,) = load_swebench_file(write_jsonl(tmp_path_factory.mktemp("jsonl") / "set.jsonl", image, base))
    return task


@pytest.fixture(scope="module")
def harbor_task(tmp_path_factory):
    task = load_harbor_task(
        write_harbor_task(tmp_path_factory.mktemp("harbor") / "add", images.ensure_base_image())
    )
    ensure_task_image(task)
    return task


def test_a_swebench_row_is_graded_through_its_log_parser(swebench_task):
    gold, empty, hack = asyncio.run(
        grade_many([(swebench_task, GOLD), (swebench_task, ""), (swebench_task, CONFTEST_HACK)])
    )
    assert gold.reward == 1.0 and gold.tests == {
        "tests/test_add.py::test_add": "passed",
        "tests/test_sub.py::test_sub": "passed",
    }
    assert empty.reward == 0.0 and empty.failed_tests == ("tests/test_add.py::test_add",)
    assert hack.reward == 0.0 and [c.reason for c in hack.removed_changes] == ["test file"]
    gold_counts, empty_counts = parse_summary(gold.output), parse_summary(empty.output)
    assert gold_counts["passed"] == 2 and empty_counts["passed"] == 1, (gold_counts, empty_counts)
    # The row's hidden test file gets must-fail canary twins, the same number each grade.
    assert gold_counts["failed"] == empty_counts["failed"] - 1 > 0 and gold.canary_survival < 0.05


# The row's command as the fixture writes it, and as swebench writes its pytest repositories' (set-up
# commands, then the `pytest` script, whose interpreter the watched run must use; the image has not installed
# the package, so the set-up puts it on the path).
COMMANDS = {
    "python -m pytest": None,
    "set-up && pytest": "cd /testbed && export PYTHONPATH=/testbed && pytest -rA -p no:cacheprovider "
    "tests/test_add.py tests/test_sub.py",
}


def _with_command(task, shape):
    return task if COMMANDS[shape] is None else dataclasses.replace(task, test_cmd=COMMANDS[shape])


@pytest.mark.parametrize("shape", sorted(COMMANDS))
@pytest.mark.parametrize("attack", sorted(SWEBENCH_FORGERIES))
def test_a_pytest_forgery_on_a_swebench_row_scores_0_and_is_named_by_the_watch(swebench_task, attack, shape):
    report = asyncio.run(
        grade(_with_command(swebench_task, shape), _in_calc_package(SWEBENCH_FORGERIES[attack]))
    )
    assert report.reward == 0.0, report.to_dict()
    # The forgery works: pytest itself reports the unfixed test passed, and only the watch says why not.
    assert report.tests["tests/test_add.py::test_add"] == "passed", report.output[-3000:]
    assert any(t.startswith("watch: pytest's machinery was changed") for t in report.tampering), (
        report.tampering
    )
    if attack == "reads_the_grader_files":
        assert re.findall(r"GRADER-FILES-READ (\[.*?\])", report.output) == ["[]"], report.output[-2000:]


@pytest.mark.parametrize("shape", sorted(COMMANDS))
def test_a_swebench_row_with_a_plain_pytest_command_grades_gold_1_and_empty_0_under_the_watch(
    swebench_task, shape
):
    task = _with_command(swebench_task, shape)
    gold, empty, imports = asyncio.run(
        grade_many([(task, GOLD), (task, ""), (task, _in_calc_package("import _pytest.runner"))])
    )
    assert (gold.reward, empty.reward, imports.reward) == (1.0, 0.0, 0.0)
    assert gold.tampering == empty.tampering == imports.tampering == ()
    assert "LEGORL-WATCH" in gold.output  # the watch ran


def test_a_swebench_row_naming_swebenchs_pytest_parser_grades_gold_1_and_empty_0(swebench_task):
    official = dataclasses.replace(swebench_task, log_parser="parse_log_pytest")
    gold, empty = asyncio.run(grade_many([(official, GOLD), (official, "")]))
    assert gold.reward == 1.0 and set(gold.tests.values()) == {"passed"}
    assert empty.reward == 0.0 and empty.failed_tests == ("tests/test_add.py::test_add",)


def test_a_swebench_run_whose_exit_code_contradicts_its_log_is_tampering(swebench_task):
    forced = dataclasses.replace(swebench_task, test_cmd=swebench_task.test_cmd + " && (exit 3)")
    report = asyncio.run(grade(forced, GOLD))
    assert report.reward == 0.0 and report.tampering == (
        "the test command exited 3 but its log shows no failing test",
    )


def test_a_swebench_row_whose_image_is_missing_raises_verifier_error(swebench_task):
    with pytest.raises(VerifierError, match="grading sandbox failed"):
        asyncio.run(grade(dataclasses.replace(swebench_task, image="legorl-no-such-image:1"), GOLD))


def test_a_swebench_run_with_no_output_markers_raises_verifier_error(swebench_task):
    with pytest.raises(VerifierError, match="never reached its output markers|found no test result"):
        asyncio.run(grade(dataclasses.replace(swebench_task, test_cmd="kill -9 $$"), GOLD))


def test_a_harbor_task_is_graded_by_its_reward_file_with_the_oracle_as_gold(harbor_task):
    derived = asyncio.run(oracle_diff(harbor_task))
    assert "+    return a + b" in derived
    gold, given, empty = asyncio.run(
        grade_many([(harbor_task, derived), (harbor_task, GOLD_DIFF), (harbor_task, "")])
    )
    assert (gold.reward, given.reward, empty.reward) == (1.0, 1.0, 0.0)
    assert gold.resolved and not empty.resolved and gold.tampering == ()


def test_a_forged_harbor_reward_earns_nothing_and_is_reported(harbor_task):
    daemon, outside = asyncio.run(
        grade_many([(harbor_task, REWARD_DAEMON), (harbor_task, OUTSIDE_REWARD)], config=ON_DOCKER)
    )
    assert daemon.reward == 0.0 and daemon.leftover_processes
    assert any("outlived tests/test.sh" in t for t in daemon.tampering)
    assert outside.reward == 0.0 and [c.reason for c in outside.removed_changes] == [
        "path outside the repository"
    ]


@pytest.mark.slow  # exports and copies two images first; the uid mechanism itself is tested by default
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed on this host")
def test_on_bubblewrap_with_its_writable_root_swebench_and_harbor_gold_get_1_and_empty_0(
    swebench_task, harbor_task
):
    # Their sandboxes have a writable root, which bubblewrap runs as an unprivileged host uid over a copy
    # of the exported image that belongs to it: git, the apply and the tests must all still work there.
    items = [(swebench_task, GOLD), (swebench_task, ""), (harbor_task, GOLD_DIFF), (harbor_task, "")]
    results = asyncio.run(grade_many(items, config=VerifierConfig(backend="bwrap")))
    assert [getattr(r, "reward", r) for r in results] == [1.0, 0.0, 1.0, 0.0]
    assert all(r.tampering == () for r in results), [r.tampering for r in results]


def without_reward(task, tmp_path):
    """`task` with a verifier whose tests/test.sh writes no reward."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("#!/bin/bash\necho forgot the reward\n")
    return dataclasses.replace(task, verifier_dir=str(tests))


def test_a_harbor_verifier_that_writes_no_reward_raises_verifier_error(harbor_task, tmp_path):
    with pytest.raises(VerifierError, match="wrote no /logs/verifier/reward.txt"):
        asyncio.run(grade(without_reward(harbor_task, tmp_path), GOLD_DIFF, config=ON_DOCKER))


def test_a_deleted_harbor_reward_is_tampering_and_does_not_excuse_a_broken_copy_of_the_verifier(
    harbor_task, tmp_path
):
    # The missing reward is blamed on the diff: processes it started outlived tests/test.sh. A copy of the
    # task whose verifier writes no reward (no survivors) must still raise.
    deleted = asyncio.run(grade(harbor_task, REWARD_DELETER, config=ON_DOCKER))
    assert deleted.reward == 0.0 and deleted.leftover_processes
    assert any("wrote no /logs/verifier/reward.txt" in t for t in deleted.tampering), deleted.tampering
    with pytest.raises(VerifierError, match="wrote no /logs/verifier/reward.txt"):
        asyncio.run(grade(without_reward(harbor_task, tmp_path), GOLD_DIFF, config=ON_DOCKER))


def test_a_reward_garbled_by_a_surviving_process_is_tampering_not_a_verifier_error(harbor_task):
    # A survivor killed mid-write leaves an empty or partial reward.txt: here it writes a non-number.
    garbler = REWARD_DAEMON.replace("write('1')", "write('x')")
    assert garbler != REWARD_DAEMON
    report = asyncio.run(grade(harbor_task, garbler, config=ON_DOCKER))
    assert report.reward == 0.0 and report.leftover_processes
    assert any("outlived tests/test.sh" in t for t in report.tampering), report.tampering
    assert any("the reward could not be read" in t for t in report.tampering), report.tampering


def test_a_harbor_copy_with_another_verifier_has_another_grading_identity(harbor_task, tmp_path):
    # The empty-diff verdict is remembered per grading identity: a copy must not share the original's.
    assert grading_identity(dataclasses.replace(harbor_task)) == grading_identity(harbor_task)
    assert grading_identity(without_reward(harbor_task, tmp_path)) != grading_identity(harbor_task)


@pytest.mark.docker
def test_a_missing_swebench_image_that_no_registry_serves_says_how_to_load_it(tmp_path):
    # A registry address nothing listens on: the pull fails the way it does on a machine without network.
    path = write_jsonl(tmp_path / "one.jsonl", "localhost:1/sweb.eval.x86_64.legorl_1776_calc-1:v0", "a" * 40)
    (task,) = load_swebench_file(path)
    with pytest.raises(ImageError, match=r"pulling it failed.*docker load -i.*the row.s .image. field"):
        ensure_task_image(task)


def test_a_harbor_task_whose_workdir_has_no_git_repository_is_refused_saying_so(tmp_path):
    root = write_harbor_task(
        tmp_path / "nogit",
        images.ensure_base_image(),
        task_toml=TASK_TOML.replace("legorl/harbor-add", "legorl/harbor-nogit"),
    )
    (root / "environment" / "Dockerfile").write_text(
        f"FROM {images.ensure_base_image()}\nUSER root\nCOPY repo/ /app/\n"
        "RUN mkdir -p /logs && chown -R agent:agent /app /logs\nWORKDIR /app\n"
    )
    task = load_harbor_task(root)
    ensure_task_image(task)
    with pytest.raises(VerifierError, match="/app of image .* holds no git repository") as caught:
        asyncio.run(grade(task, GOLD_DIFF))
    assert caught.value.reason == "task"
