"""The red team's reward hacks against the verifier, one test per attack class (issue 14), on a real built-in
task on both backends (Docker, and bubblewrap with no daemon answering): each scores 0 and is reported as
tampering (or is refused), none is a dropped trial."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil

import pytest
from suite_diffs import (
    PATCH_PYTEST_REPORTS,
    REPLACE_JUNIT_AT_EXIT,
    SWALLOW_FAILURES_SPARING_CANARIES,
    append,
    make_diff,
    package_init,
)

from legorl_jax.config import VerifierConfig
from legorl_jax.sandbox import daemon
from legorl_jax.tasks.builtin import SUITE_DIR, load_builtin_task
from legorl_jax.tasks.pytest_report import parse_summary
from legorl_jax.tasks.report import VerifierError, VerifierReport, drop_rates
from legorl_jax.tasks.schema import Timeouts
from legorl_jax.tasks.task_image import ensure_task_image
from legorl_jax.tasks.verifier import (
    _changed_paths,
    _protected_writes,
    default_sandbox_factory,
    grade,
    grade_many,
    verifier_sandbox_spec,
)

TASK_ID = "autocomplete-casefold-prefix"


@pytest.fixture(scope="module", params=[pytest.param("docker", marks=pytest.mark.docker), "bwrap"])
def backend(request, tmp_path_factory):
    """The backend every grade of the module runs on; for bubblewrap no Docker daemon answers."""
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "bwrap":
            if shutil.which("bwrap") is None:
                pytest.skip("bubblewrap is not installed on this host (tools/system_setup.sh installs it)")
            patch.setenv("DOCKER_HOST", f"unix://{tmp_path_factory.mktemp('nodaemon')}/none.sock")
            assert not daemon.available()
        yield request.param


@pytest.fixture(scope="module")
def config(backend):
    return VerifierConfig(concurrency=4, backend=backend)


@pytest.fixture(scope="module")
def task(backend):
    task = load_builtin_task(SUITE_DIR / TASK_ID)
    ensure_task_image(task)
    return task


def _with_gold_and(task, code: str) -> str:
    return make_diff(task, lambda r: append(r / package_init(task), code), with_gold=False)


# Attack class 1: package code that makes the hidden tests pass while sparing the canary.
@pytest.mark.parametrize("hack", ["swallows_failures_sparing_canaries", "forges_every_report"])
def test_package_code_that_passes_failing_tests_is_caught_by_the_planted_canary(task, config, hack):
    code = (
        SWALLOW_FAILURES_SPARING_CANARIES
        if hack == "swallows_failures_sparing_canaries"
        else PATCH_PYTEST_REPORTS
    )
    report = asyncio.run(grade(task, _with_gold_and(task, code), config=config))
    assert isinstance(report, VerifierReport), report
    assert all(report.tests[t] == "passed" for t in task.FAIL_TO_PASS), report.tests  # the hack did work
    assert report.reward == 0.0
    assert any(
        "canary" in t and "must-fail twin" in t and "reported passed" in t for t in report.tampering
    ), report.tampering


def test_the_gold_patch_fails_every_twin_and_nothing_else(task, config):
    report = asyncio.run(grade(task, task.patch, config=config))
    assert report.reward == 1.0 and report.tampering == (), report.to_dict()
    counts = parse_summary(report.output)
    assert counts["failed"] >= 1 and counts["passed"] == len(task.tests), (
        counts
    )  # the twins, and nothing else


class _CountingSandbox:
    """A real sandbox that counts the commands the grader starts in it (each one a process start, on
    bubblewrap a whole bubblewrap run): the grade's fixed cost in a number the host's load cannot move."""

    def __init__(self, inner, commands: list[str]):
        self.inner, self.commands = inner, commands

    async def __aenter__(self):
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc):
        await self.inner.__aexit__(*exc)

    async def exec(self, cmd, **kwargs):
        self.commands.append(cmd if isinstance(cmd, str) else " ".join(cmd)[:40])
        return await self.inner.exec(cmd, **kwargs)

    async def write_file(self, path, data):
        self.commands.append(f"write {path}")
        return await self.inner.write_file(path, data)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_builtin_grade_starts_thirteen_sandbox_commands(task, backend):
    # Set-up + stamp + work-tree check, private git folder + hidden tests, and clearing + nonce + process
    # list are one command each; before round 3 a grade started 16, after it 18 (so a bubblewrap grade took
    # 1.4x as long).
    commands: list[str] = []
    factory = lambda spec: _CountingSandbox(default_sandbox_factory(spec, backend), commands)  # noqa: E731
    report = asyncio.run(grade(task, task.patch, sandbox_factory=factory))
    assert report.reward == 1.0, report.to_dict()
    assert len(commands) == 13, commands
    assert {"start", "apply", "hidden_tests", "plan", "clear", "tests", "total"} <= set(report.durations)


# Attack class 2: a report that blocks or never ends the reader.
@pytest.mark.parametrize(
    ("replacement", "why"),
    [
        ("_os.mkfifo(_path)", "is not a regular file"),
        ("_os.symlink('/dev/zero', _path)", "is a symbolic link"),
    ],
)
def test_a_junit_report_replaced_by_a_fifo_or_a_link_is_tampering_not_a_hang(task, config, replacement, why):
    diff = _with_gold_and(task, REPLACE_JUNIT_AT_EXIT.replace("REPLACE", replacement))
    report = asyncio.run(asyncio.wait_for(grade(task, diff, config=config), timeout=300))
    assert report.reward == 0.0
    assert any(why in t for t in report.tampering), report.tampering


# Attack class 3: sections whose header names one file and whose ---/+++ lines name another.
@pytest.mark.parametrize("target", ["tests/conftest.py", ".git/config"])
def test_a_diff_that_writes_other_paths_than_its_header_names_is_refused(task, config, target):
    diff = (
        f"diff --git a/README.md b/README.md\n--- /dev/null\n+++ b/{target}\n@@ -0,0 +1,2 @@\n"
        '+[filter "x"]\n+\tsmudge = sed s/assert/pass/\n'
    )
    report = asyncio.run(grade(task, diff + task.patch, config=config))
    assert report.reward == 0.0 and report.apply.status == "malformed"
    assert "name different files" in report.apply.log


def test_renaming_a_module_into_a_stdlib_name_is_dropped(task, config):
    init = package_init(task)
    module = sorted(p for p in task.patch.split() if p.startswith("b/") and p.endswith(".py"))[0][2:]
    diff = (
        f"diff --git a/{module} b/json.py\nsimilarity index 100%\nrename from {module}\nrename to json.py\n"
    )
    report = asyncio.run(grade(task, diff, config=config))
    assert report.reward == 0.0 and [c.reason for c in report.removed_changes] == ["shadows the test runner"]
    assert init  # the package exists; the rename would have shadowed `json` for pytest


# Attack class 4: crashing, killing or timing out turned a failing diff into a dropped trial.
@pytest.mark.parametrize(
    "crash",
    [
        "import os\nos._exit(1)\n",
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
        "import os\nos.close(1)\nos.close(2)\nos._exit(3)\n",
        "import time\ntime.sleep(600)\n",
    ],
    ids=["exit", "sigkill-self", "close-pipes", "sleep-past-timeout"],
)
def test_a_diff_that_crashes_or_times_out_the_tests_scores_0_as_tampering(task, config, crash):
    # 15 s: far above the few seconds the tests take, and what the sleeping case waits for.
    task = dataclasses.replace(task, timeouts=Timeouts(verify_s=15))
    diff = _with_gold_and(task, "\n" + crash)
    report = asyncio.run(grade(task, diff, config=config))
    assert isinstance(report, VerifierReport), report
    assert report.reward == 0.0
    assert any("not with the empty diff" in t for t in report.tampering), report.tampering


def test_a_fork_bomb_scores_0_as_tampering(task, config, backend):
    task = dataclasses.replace(task, timeouts=Timeouts(verify_s=15))
    bomb = "\nimport os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    report = asyncio.run(grade(task, _with_gold_and(task, bomb), config=config))
    assert isinstance(report, VerifierReport), report
    assert report.reward == 0.0
    assert any("not with the empty diff" in t for t in report.tampering), report.tampering


def test_a_failure_the_empty_diff_shares_is_still_infrastructure(task, config):
    broken = dataclasses.replace(task, test_cmd="python3 -m no_such_test_runner")
    with pytest.raises(VerifierError, match="left no JUnit report") as caught:
        asyncio.run(grade(broken, task.patch, config=config))
    assert caught.value.reason == "no_result"


# Attack class 5: one bad item ended the batch.
def test_one_item_that_raises_leaves_the_others_results_in_the_batch(task, config):
    bad_escape = 'diff --git "a/\\777x" "b/\\777x"\n--- "a/\\777x"\n+++ "b/\\777x"\n@@ -1 +1 @@\n-a\n+b\n'
    results = asyncio.run(
        grade_many([(task, task.patch), (task, bad_escape), (task, b"not text")], config=config)
    )
    assert results[0].reward == 1.0
    assert results[1].reward == 0.0 and results[1].apply.status == "malformed"
    assert isinstance(results[2], VerifierError) and results[2].reason == "internal"
    assert drop_rates(results)["internal"] == pytest.approx(1 / 3)


# Attack class 3, defence in depth: whatever the apply writes is judged again, not the diff's text.
@pytest.mark.parametrize(
    ("write", "expected"),
    [
        ("mkdir -p .git/info && printf '* filter=x\\n' > .git/info/attributes", "git metadata"),
        ("printf 'import os\\n' > conftest.py", "test file"),
    ],
)
def test_protected_files_the_apply_really_wrote_are_tampering(task, config, write, expected):
    async def scenario():
        async with default_sandbox_factory(
            verifier_sandbox_spec(task, config), backend=config.backend
        ) as sandbox:
            scratch = "/tmp/legorl-verify-test"
            await sandbox.exec(["sh", "-c", f"mkdir -p {scratch} && touch {scratch}/before-apply"])
            before = await _changed_paths(sandbox, task)
            await asyncio.sleep(0.05)  # a later mtime than the stamp, as an apply has
            assert (await sandbox.exec(["sh", "-c", write], workdir=task.workdir)).exit_code == 0
            return await _protected_writes(sandbox, task, scratch, before)

    problems = asyncio.run(scenario())
    assert problems and expected in problems[0], problems
