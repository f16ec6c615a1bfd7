"""The issue-31 red team's forgeries against the verifier, on real built-in tasks on both backends (Docker,
and bubblewrap with no daemon answering): package code that reads the planted file to spare the canaries,
package code that reads what the grader keeps in the sandbox, and a package that lies (`==` always true) only
on the bug's inputs. Each grade scores 0 and names what caught it. The default suite grades two tasks per
class and the hand-written liar once; the `slow` sweeps grade five tasks for the two pytest forgeries and the
liar 20 times over five tasks."""

from __future__ import annotations

import asyncio
import re
import shutil

import pytest
from suite_diffs import (
    HAND_LIARS,
    READS_THE_CANARIES,
    READS_THE_GRADER_FILES,
    append,
    hand_liar_diff,
    liar_diff,
    make_diff,
    package_init,
)

from legorl_jax.config import VerifierConfig
from legorl_jax.sandbox import daemon
from legorl_jax.tasks.builtin import SUITE_DIR, load_builtin_task
from legorl_jax.tasks.report import VerifierReport
from legorl_jax.tasks.task_image import ensure_task_image
from legorl_jax.tasks.verifier import grade_many

# Tasks on which the liar's lie is what a listed test compares (`==` on a returned object): on the others of
# the suite its answers reach the tests only through attributes and items, i.e. as the fixed values, so it
# is a fix there, not a forgery, and the twins rightly see nothing. On qsparse the lie is written by hand
# (`HAND_LIARS`): the public functions answer "equal to anything" on multi-byte escapes, computing nothing.
LIAR_TASKS = [
    "money-allocate-negative-amounts",
    "pqueue-remove-heap-order",
    "ttlcache-refreshed-key-purged",
    "stats-histogram-drops-max",
    *HAND_LIARS,
]
FIVE_TASKS = [*LIAR_TASKS[:3], "dijkstra-stops-at-first-route", "stats-histogram-drops-max"]
DEFAULT_TASKS = LIAR_TASKS[:2]


@pytest.fixture(scope="module", params=[pytest.param("docker", marks=pytest.mark.docker), "bwrap"])
def config(request, tmp_path_factory):
    """Grading on one backend; for bubblewrap no Docker daemon answers."""
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "bwrap":
            if shutil.which("bwrap") is None:
                pytest.skip("bubblewrap is not installed on this host (tools/system_setup.sh installs it)")
            patch.setenv("DOCKER_HOST", f"unix://{tmp_path_factory.mktemp('nodaemon')}/none.sock")
            assert not daemon.available()
        yield VerifierConfig(concurrency=3, backend=request.param)


def _tasks(ids):
    tasks = [load_builtin_task(SUITE_DIR / i) for i in ids]
    for task in tasks:
        ensure_task_image(task)
    return tasks


def _in_package(code):
    return lambda task: make_diff(task, lambda r: append(r / package_init(task), code))


ATTACKS = {
    "reads_the_canaries": _in_package(READS_THE_CANARIES),
    "reads_the_grader_files": _in_package(READS_THE_GRADER_FILES),
    "lies_on_the_bug_inputs": lambda task: (hand_liar_diff if task.instance_id in HAND_LIARS else liar_diff)(
        task
    ),
}
# What each grade must name: the watch for the two that wrap pytest, the canary twins for the liar.
CAUGHT_BY = {
    "reads_the_canaries": "watch:",
    "reads_the_grader_files": "watch:",
    "lies_on_the_bug_inputs": "canary:",
}


def _grade(config, attack, tasks, repeats=1):
    pairs = [(task, ATTACKS[attack](task)) for task in tasks for _ in range(repeats)]
    return list(zip([t for t, _ in pairs], asyncio.run(grade_many(pairs, config=config)), strict=True))


def _assert_caught(attack, graded):
    for task, report in graded:
        assert isinstance(report, VerifierReport), report
        assert report.reward == 0.0, report.to_dict()
        assert any(t.startswith(CAUGHT_BY[attack]) for t in report.tampering), (
            task.instance_id,
            report.tampering,
        )
        assert report.canary_survival is not None and 0 < report.canary_survival <= 0.05
        if attack == "lies_on_the_bug_inputs":  # the lie itself works: only the twins see it
            assert all(report.tests[t] == "passed" for t in task.FAIL_TO_PASS), report.tests
        if attack == "reads_the_grader_files":
            found = re.findall(r"GRADER-FILES-READ (\[.*?\])", report.output)
            assert found == ["[]"], (found, report.output[-2000:])


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_each_forgery_scores_0_and_is_named_on_a_few_tasks(config, attack):
    _assert_caught(attack, _grade(config, attack, _tasks(DEFAULT_TASKS)))


@pytest.mark.slow
@pytest.mark.parametrize("attack", ["reads_the_canaries", "reads_the_grader_files"])
def test_each_pytest_forgery_scores_0_and_is_named_on_five_tasks(config, attack):
    _assert_caught(attack, _grade(config, attack, _tasks(FIVE_TASKS)))


def test_the_hand_written_liar_scores_0_and_is_named(config):
    _assert_caught(
        "lies_on_the_bug_inputs", _grade(config, "lies_on_the_bug_inputs", _tasks(list(HAND_LIARS)))
    )


@pytest.mark.slow
def test_the_liar_scores_0_in_twenty_grades_over_five_tasks(config):
    assert len(LIAR_TASKS) == 5
    _assert_caught("lies_on_the_bug_inputs", _grade(config, "lies_on_the_bug_inputs", _tasks(LIAR_TASKS), 4))
